//! Which lifecycle action applies to an entry, and from when: S3's date
//! maths over a bucket's rules. Pure functions of the entry, the rules and
//! the day length, shared by the leader's scanner (which proposes), apply
//! (which checks each item again before acting) and LookupKey (which reports
//! the expiration).
//!
//! - `Expiration.Days`: when the current version was written (`written_ms`,
//!   S3's Last-Modified) plus N days, rounded up to the next day boundary
//!   (midnight UTC with 86,400,000 ms days); `Expiration.Date`: that
//!   instant.
//! - `NoncurrentVersionExpiration`: N days after the version became
//!   noncurrent, rounded the same way, once at least
//!   `NewerNoncurrentVersions` newer noncurrent versions exist.
//! - `ExpiredObjectDeleteMarker`: a current delete marker with no other
//!   version goes; a `Days`/`Date` expiration removes such a marker too, once
//!   its days have passed for the marker (S3's expired object delete marker).
//! - `AbortIncompleteMultipartUpload`: N days after initiation, rounded.
//!
//! Several matching rules: the earliest instant wins (S3: the shorter expiry
//! wins); at the same instant, the rule listed first.

use std::collections::BTreeMap;

use om_proto::store::KeyRecord;
use om_proto::v1::{LifecycleRule, lifecycle_filter::Predicate};

/// `LifecycleItem.action` values.
pub const ACTION_EXPIRE: u32 = 1;
pub const ACTION_EXPIRE_NONCURRENT: u32 = 2;
pub const ACTION_REMOVE_DELETE_MARKER: u32 = 3;
pub const ACTION_ABORT_UPLOAD: u32 = 4;
/// Expire a file of a FILE_SYSTEM_OPTIMIZED bucket (named by its path).
pub const ACTION_EXPIRE_FILE: u32 = 5;

pub const ACTIONS: [u32; 5] = [
    ACTION_EXPIRE,
    ACTION_EXPIRE_NONCURRENT,
    ACTION_REMOVE_DELETE_MARKER,
    ACTION_ABORT_UPLOAD,
    ACTION_EXPIRE_FILE,
];

/// The name of an action in status, metrics and the audit of operators.
pub fn action_name(action: u32) -> &'static str {
    match action {
        ACTION_EXPIRE | ACTION_EXPIRE_FILE => "expire",
        ACTION_EXPIRE_NONCURRENT => "expire_noncurrent",
        ACTION_REMOVE_DELETE_MARKER => "remove_delete_marker",
        ACTION_ABORT_UPLOAD => "abort_upload",
        _ => "unknown",
    }
}

/// When a version's data was written: the instant its `Days` count from
/// (S3 counts from the object's Last-Modified). That is its modification
/// time, which every write of the key moves (PutKey, CommitKey, CopyKey,
/// CompleteMultipartUpload, an FSO file committed over another, a rename)
/// and a tag change does not. Not its creation time: an overwrite in an
/// unversioned bucket keeps the key's first creation time (as Ozone does),
/// and counting from it would expire data just written as if it were the
/// object it replaced. Apply counts from it only from rules 7 on
/// (`apply::lifecycle`); a delete marker's two times are equal.
pub fn written_ms(rec: &KeyRecord) -> u64 {
    rec.modification_time_ms
}

/// `base_ms` plus `days` days, rounded up to the next day boundary.
pub fn after_days(base_ms: u64, days: u32, day_ms: u64) -> u64 {
    let day_ms = day_ms.max(1);
    let t = base_ms.saturating_add(u64::from(days).saturating_mul(day_ms));
    t.div_ceil(day_ms).saturating_mul(day_ms)
}

/// What a rule's filter sees of an entry.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub key: &'a str,
    pub size: u64,
    pub tags: &'a BTreeMap<String, String>,
    /// Multipart uploads have no size yet: a size condition never matches
    /// them.
    pub sized: bool,
}

/// Whether `rule` is enabled and its filter holds for `s`.
pub fn matches(rule: &LifecycleRule, s: &Subject<'_>) -> bool {
    if !rule.enabled {
        return false;
    }
    let has_tag = |k: &str, v: &str| s.tags.get(k).is_some_and(|x| x == v);
    match rule.filter.as_ref().and_then(|f| f.predicate.as_ref()) {
        None => true,
        Some(Predicate::Prefix(p)) => s.key.starts_with(p.as_str()),
        Some(Predicate::Tag(t)) => has_tag(&t.key, &t.value),
        Some(Predicate::ObjectSizeGreaterThan(n)) => s.sized && s.size > *n,
        Some(Predicate::ObjectSizeLessThan(n)) => s.sized && s.size < *n,
        Some(Predicate::And(a)) => {
            s.key.starts_with(a.prefix.as_str())
                && a.tags.iter().all(|t| has_tag(&t.key, &t.value))
                && a.object_size_greater_than
                    .is_none_or(|n| s.sized && s.size > n)
                && a.object_size_less_than
                    .is_none_or(|n| s.sized && s.size < n)
        }
    }
}

/// When an action falls due, and the rule that decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due<'a> {
    pub at_ms: u64,
    pub rule_id: &'a str,
}

impl Due<'_> {
    pub fn is_due(&self, now_ms: u64) -> bool {
        now_ms >= self.at_ms
    }
}

/// The earliest of the candidates; the first listed at a tie.
fn earliest<'a>(candidates: impl Iterator<Item = Due<'a>>) -> Option<Due<'a>> {
    candidates.fold(None, |best: Option<Due<'a>>, d| match best {
        Some(b) if b.at_ms <= d.at_ms => Some(b),
        _ => Some(d),
    })
}

/// When the current version of an object (not a delete marker) written at
/// `written_ms` (see `written_ms`) expires.
pub fn current_expiry<'a>(
    rules: &'a [LifecycleRule],
    s: &Subject<'_>,
    written_ms: u64,
    day_ms: u64,
) -> Option<Due<'a>> {
    earliest(rules.iter().filter(|r| matches(r, s)).filter_map(|r| {
        let e = r.expiration.as_ref()?;
        let at_ms = match (e.days, e.date_ms) {
            (Some(days), _) => after_days(written_ms, days, day_ms),
            (None, Some(date)) => date,
            (None, None) => return None,
        };
        Some(Due {
            at_ms,
            rule_id: &r.id,
        })
    }))
}

/// When a noncurrent version (or noncurrent delete marker) that became
/// noncurrent at `since_ms`, with `newer` noncurrent versions newer than it,
/// is removed.
pub fn noncurrent_expiry<'a>(
    rules: &'a [LifecycleRule],
    s: &Subject<'_>,
    since_ms: u64,
    newer: u32,
    day_ms: u64,
) -> Option<Due<'a>> {
    earliest(rules.iter().filter(|r| matches(r, s)).filter_map(|r| {
        let n = r.noncurrent_version_expiration.as_ref()?;
        (newer >= n.newer_noncurrent_versions).then(|| Due {
            at_ms: after_days(since_ms, n.noncurrent_days, day_ms),
            rule_id: &r.id,
        })
    }))
}

/// Most `NewerNoncurrentVersions` any rule asks to keep: how far back a
/// version's newer siblings need counting.
pub fn newer_needed(rules: &[LifecycleRule]) -> u32 {
    rules
        .iter()
        .filter_map(|r| r.noncurrent_version_expiration.as_ref())
        .map(|n| n.newer_noncurrent_versions)
        .max()
        .unwrap_or(0)
}

/// The rule that removes a current delete marker of `key`, created at
/// `created_ms`, once it is the key's only version (an expired object delete
/// marker), at `now_ms`: one with `ExpiredObjectDeleteMarker` at once, or
/// one whose `Days`/`Date` expiration has passed for the marker (S3: the
/// Expiration action also removes expired object delete markers).
pub fn expired_marker_rule<'a>(
    rules: &'a [LifecycleRule],
    key: &str,
    created_ms: u64,
    day_ms: u64,
    now_ms: u64,
) -> Option<&'a str> {
    let none = BTreeMap::new();
    let s = Subject {
        key,
        size: 0,
        tags: &none,
        sized: true,
    };
    rules
        .iter()
        .filter(|r| matches(r, &s))
        .find(|r| {
            r.expiration.as_ref().is_some_and(|e| {
                e.expired_object_delete_marker == Some(true)
                    || match (e.days, e.date_ms) {
                        (Some(days), _) => after_days(created_ms, days, day_ms) <= now_ms,
                        (None, Some(date)) => date <= now_ms,
                        (None, None) => false,
                    }
            })
        })
        .map(|r| r.id.as_str())
}

/// When an upload of `key` initiated at `initiated_ms` is aborted.
pub fn upload_expiry<'a>(
    rules: &'a [LifecycleRule],
    key: &str,
    initiated_ms: u64,
    day_ms: u64,
) -> Option<Due<'a>> {
    let none = BTreeMap::new();
    let s = Subject {
        key,
        size: 0,
        tags: &none,
        sized: false,
    };
    earliest(rules.iter().filter(|r| matches(r, &s)).filter_map(|r| {
        let a = r.abort_incomplete_multipart_upload.as_ref()?;
        Some(Due {
            at_ms: after_days(initiated_ms, a.days_after_initiation, day_ms),
            rule_id: &r.id,
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use om_proto::v1::{
        LifecycleAbortUpload, LifecycleAnd, LifecycleExpiration, LifecycleFilter,
        LifecycleNoncurrentExpiration, LifecycleTag,
    };

    const DAY: u64 = 86_400_000;

    fn utc(y: i64, m: u32, d: u32, h: u32, min: u32) -> u64 {
        // Days from the civil date (Howard Hinnant's algorithm).
        let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * i64::from(m) + 2) / 5 + i64::from(d) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        (days as u64) * DAY + u64::from(h) * 3_600_000 + u64::from(min) * 60_000
    }

    fn rule(id: &str, filter: Option<Predicate>) -> LifecycleRule {
        LifecycleRule {
            id: id.into(),
            enabled: true,
            filter: filter.map(|p| LifecycleFilter { predicate: Some(p) }),
            ..Default::default()
        }
    }

    fn expire_days(id: &str, days: u32, filter: Option<Predicate>) -> LifecycleRule {
        LifecycleRule {
            expiration: Some(LifecycleExpiration {
                days: Some(days),
                ..Default::default()
            }),
            ..rule(id, filter)
        }
    }

    fn subject<'a>(key: &'a str, size: u64, tags: &'a BTreeMap<String, String>) -> Subject<'a> {
        Subject {
            key,
            size,
            tags,
            sized: true,
        }
    }

    #[test]
    fn days_round_up_to_the_next_midnight_utc() {
        // AWS's example: created 2014-01-15 10:30 UTC, 3 days: 2014-01-19 00:00.
        let created = utc(2014, 1, 15, 10, 30);
        assert_eq!(after_days(created, 3, DAY), utc(2014, 1, 19, 0, 0));
        // Created at a midnight: exactly N days later.
        assert_eq!(
            after_days(utc(2014, 1, 15, 0, 0), 3, DAY),
            utc(2014, 1, 18, 0, 0)
        );
        // A millisecond past midnight rounds to the next one.
        assert_eq!(
            after_days(utc(2014, 1, 15, 0, 0) + 1, 1, DAY),
            utc(2014, 1, 17, 0, 0)
        );
        // Short test days round the same way.
        assert_eq!(after_days(1_500, 2, 1_000), 4_000);
        // Past the end of time: never.
        assert_eq!(after_days(u64::MAX - 5, 1, DAY), u64::MAX);
    }

    #[test]
    fn the_earliest_matching_rule_decides() {
        let none = BTreeMap::new();
        let rules = vec![
            expire_days("long", 30, None),
            expire_days("logs", 7, Some(Predicate::Prefix("logs/".into()))),
            expire_days("logs-too", 7, Some(Predicate::Prefix("logs/".into()))),
            LifecycleRule {
                enabled: false,
                ..expire_days("off", 1, None)
            },
        ];
        let created = utc(2024, 3, 1, 12, 0);
        let d = current_expiry(&rules, &subject("logs/a", 1, &none), created, DAY).unwrap();
        assert_eq!(d.rule_id, "logs");
        assert_eq!(d.at_ms, utc(2024, 3, 9, 0, 0));
        let d = current_expiry(&rules, &subject("data/a", 1, &none), created, DAY).unwrap();
        assert_eq!((d.rule_id, d.at_ms), ("long", utc(2024, 4, 1, 0, 0)));
        assert!(!d.is_due(utc(2024, 3, 31, 23, 59)));
        assert!(d.is_due(utc(2024, 4, 1, 0, 0)));
        // A date rule: due on that instant.
        let date = utc(2024, 6, 1, 0, 0);
        let rules = vec![LifecycleRule {
            expiration: Some(LifecycleExpiration {
                date_ms: Some(date),
                ..Default::default()
            }),
            ..rule("d", None)
        }];
        let d = current_expiry(&rules, &subject("x", 1, &none), created, DAY).unwrap();
        assert_eq!(d.at_ms, date);
        assert!(current_expiry(&[rule("none", None)], &subject("x", 1, &none), 0, DAY).is_none());
    }

    #[test]
    fn filters_match_tags_sizes_and_all_of_and() {
        let tags: BTreeMap<String, String> = [("class".to_string(), "tmp".to_string())].into();
        let none = BTreeMap::new();
        let tag = |k: &str, v: &str| LifecycleTag {
            key: k.into(),
            value: v.into(),
        };
        let r = rule("t", Some(Predicate::Tag(tag("class", "tmp"))));
        assert!(matches(&r, &subject("a", 0, &tags)));
        assert!(!matches(&r, &subject("a", 0, &none)));
        let r = rule("t", Some(Predicate::Tag(tag("class", "keep"))));
        assert!(!matches(&r, &subject("a", 0, &tags)));
        let gt = rule("gt", Some(Predicate::ObjectSizeGreaterThan(10)));
        assert!(!matches(&gt, &subject("a", 10, &none)));
        assert!(matches(&gt, &subject("a", 11, &none)));
        let lt = rule("lt", Some(Predicate::ObjectSizeLessThan(10)));
        assert!(matches(&lt, &subject("a", 9, &none)));
        assert!(!matches(&lt, &subject("a", 10, &none)));
        let no_size = Subject {
            sized: false,
            ..subject("a", 0, &none)
        };
        assert!(!matches(&lt, &no_size));
        let and = rule(
            "and",
            Some(Predicate::And(LifecycleAnd {
                prefix: "p/".into(),
                tags: vec![tag("class", "tmp")],
                object_size_greater_than: Some(1),
                object_size_less_than: Some(100),
            })),
        );
        assert!(matches(&and, &subject("p/x", 50, &tags)));
        assert!(!matches(&and, &subject("q/x", 50, &tags)));
        assert!(!matches(&and, &subject("p/x", 50, &none)));
        assert!(!matches(&and, &subject("p/x", 100, &tags)));
        assert!(!matches(&and, &subject("p/x", 1, &tags)));
    }

    #[test]
    fn noncurrent_versions_count_from_becoming_noncurrent_and_keep_the_newest() {
        let none = BTreeMap::new();
        let rules = vec![LifecycleRule {
            noncurrent_version_expiration: Some(LifecycleNoncurrentExpiration {
                noncurrent_days: 2,
                newer_noncurrent_versions: 3,
            }),
            ..rule("nc", None)
        }];
        let since = utc(2024, 1, 1, 8, 0);
        let s = subject("k", 1, &none);
        assert!(noncurrent_expiry(&rules, &s, since, 2, DAY).is_none());
        let d = noncurrent_expiry(&rules, &s, since, 3, DAY).unwrap();
        assert_eq!(d.at_ms, utc(2024, 1, 4, 0, 0));
        assert_eq!(newer_needed(&rules), 3);
    }

    #[test]
    fn delete_markers_and_uploads() {
        let rules = vec![
            LifecycleRule {
                expiration: Some(LifecycleExpiration {
                    expired_object_delete_marker: Some(true),
                    ..Default::default()
                }),
                ..rule("m", Some(Predicate::Prefix("a/".into())))
            },
            LifecycleRule {
                abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                    days_after_initiation: 1,
                }),
                ..rule("u", None)
            },
            LifecycleRule {
                abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                    days_after_initiation: 1,
                }),
                ..rule("sized", Some(Predicate::ObjectSizeLessThan(5)))
            },
        ];
        assert_eq!(expired_marker_rule(&rules, "a/x", 0, DAY, 0), Some("m"));
        assert_eq!(expired_marker_rule(&rules, "b/x", 0, DAY, u64::MAX), None);
        // A Days expiration removes a lone marker once the days have passed
        // for the marker itself.
        let days = vec![expire_days("d", 2, None)];
        let made = utc(2024, 1, 1, 6, 0);
        let due = utc(2024, 1, 4, 0, 0);
        assert_eq!(expired_marker_rule(&days, "k", made, DAY, due - 1), None);
        assert_eq!(expired_marker_rule(&days, "k", made, DAY, due), Some("d"));
        let d = upload_expiry(&rules, "b/x", utc(2024, 1, 1, 23, 59), DAY).unwrap();
        assert_eq!((d.rule_id, d.at_ms), ("u", utc(2024, 1, 3, 0, 0)));
    }
}
