//! Lifecycle configurations (S3's model): validation, shared by the edge and
//! apply, with S3's rules and om's byte limits.
//!
//! A configuration is at most `MAX_RULES` rules with unique ids of at most
//! `MAX_RULE_ID_CHARS` characters. Each rule needs at least one action it can
//! run; day counts are positive, an expiration date is a midnight UTC,
//! `ExpiredObjectDeleteMarker` (true or false) stands alone in its
//! `Expiration`, and neither it (true) nor `AbortIncompleteMultipartUpload`
//! combines with a tag filter. Actions om does not run (`Transitions`...) are
//! refused by name. Every refusal is INVALID_ARGUMENT naming the rule (its id
//! in the message, its position and field in `field`).
//!
//! `validate` holds the rules apply checks again on every replica, which may
//! only ever loosen (a logged configuration must pass them whatever binary
//! replays it). `validate_request` adds what the edge alone enforces, which
//! may tighten: S3's requirement of a `Filter` (or `Prefix`) in every rule,
//! which configurations stored before it lack. A rule without an id gets one
//! at the edge (`assign_ids`), before the command is proposed, so every
//! replica stores the same.

pub mod eval;
pub mod scan;

use om_proto::v1::{LifecycleFilter, LifecycleRule, LifecycleTag, lifecycle_filter::Predicate};
use prost::Message;

use crate::error::OmError;
pub use crate::limits::{
    MAX_CONFIG_BYTES, MAX_FILTER_TAGS, MAX_NEWER_NONCURRENT_VERSIONS, MAX_RULE_ID_CHARS, MAX_RULES,
};
use crate::validate::{MAX_KEY_BYTES, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, quote_in};

pub const DAY_MS: u64 = 86_400_000;

/// The rule a refusal names, and the apply rules it is worded by
/// (`validate::quote_in`).
#[derive(Clone, Copy)]
struct Named<'a> {
    rule: &'a LifecycleRule,
    rules: u32,
}

fn bad(reason: &str, field: String, rule: Named<'_>, what: &str) -> OmError {
    OmError::invalid(
        reason,
        field,
        format!(
            "lifecycle rule {}: {what}",
            quote_in(rule.rules, &rule.rule.id)
        ),
    )
}

fn tag(t: &LifecycleTag, field: String, rule: Named<'_>) -> Result<(), OmError> {
    let chars = |s: &str| s.chars().count();
    if t.key.is_empty() || chars(&t.key) > MAX_TAG_KEY_CHARS {
        return Err(bad(
            "INVALID_TAG",
            field,
            rule,
            &format!("a tag key has 1 to {MAX_TAG_KEY_CHARS} characters"),
        ));
    }
    if chars(&t.value) > MAX_TAG_VALUE_CHARS {
        return Err(bad(
            "INVALID_TAG",
            field,
            rule,
            &format!("a tag value has at most {MAX_TAG_VALUE_CHARS} characters"),
        ));
    }
    Ok(())
}

fn prefix(p: &str, field: String, rule: Named<'_>) -> Result<(), OmError> {
    if p.len() > MAX_KEY_BYTES || p.contains('\0') {
        return Err(bad(
            "INVALID_FILTER",
            field,
            rule,
            &format!("a prefix has at most {MAX_KEY_BYTES} bytes and no NUL"),
        ));
    }
    Ok(())
}

/// Checks a filter; says whether it names tags.
fn filter(f: &LifecycleFilter, at: &str, rule: Named<'_>) -> Result<bool, OmError> {
    match &f.predicate {
        None => Ok(false),
        Some(Predicate::Prefix(p)) => {
            prefix(p, format!("{at}.filter.prefix"), rule).map(|()| false)
        }
        Some(Predicate::Tag(t)) => tag(t, format!("{at}.filter.tag"), rule).map(|()| true),
        Some(Predicate::ObjectSizeGreaterThan(_)) => Ok(false),
        Some(Predicate::ObjectSizeLessThan(n)) => {
            if *n == 0 {
                return Err(bad(
                    "INVALID_FILTER",
                    format!("{at}.filter.object_size_less_than"),
                    rule,
                    "ObjectSizeLessThan must be positive",
                ));
            }
            Ok(false)
        }
        Some(Predicate::And(a)) => {
            let field = format!("{at}.filter.and");
            prefix(&a.prefix, format!("{field}.prefix"), rule)?;
            if a.tags.len() > MAX_FILTER_TAGS {
                return Err(bad(
                    "INVALID_FILTER",
                    format!("{field}.tags"),
                    rule,
                    &format!("a filter names at most {MAX_FILTER_TAGS} tags"),
                ));
            }
            let mut keys = std::collections::BTreeSet::new();
            for t in &a.tags {
                tag(t, format!("{field}.tags"), rule)?;
                if !keys.insert(t.key.as_str()) {
                    return Err(bad(
                        "INVALID_FILTER",
                        format!("{field}.tags"),
                        rule,
                        &format!("tag {} is named twice", quote_in(rule.rules, &t.key)),
                    ));
                }
            }
            let conditions = usize::from(!a.prefix.is_empty())
                + a.tags.len()
                + usize::from(a.object_size_greater_than.is_some())
                + usize::from(a.object_size_less_than.is_some());
            if conditions < 2 {
                return Err(bad(
                    "INVALID_FILTER",
                    field,
                    rule,
                    "And combines at least two conditions",
                ));
            }
            if let (Some(gt), Some(lt)) = (a.object_size_greater_than, a.object_size_less_than)
                && lt <= gt
            {
                return Err(bad(
                    "INVALID_FILTER",
                    format!("{field}.object_size_less_than"),
                    rule,
                    "ObjectSizeLessThan must be greater than ObjectSizeGreaterThan",
                ));
            }
            Ok(!a.tags.is_empty())
        }
    }
}

fn days(n: u32, field: String, rule: Named<'_>) -> Result<(), OmError> {
    if n == 0 {
        return Err(bad("INVALID_DAYS", field, rule, "day counts are positive"));
    }
    Ok(())
}

fn rule(r: &LifecycleRule, i: usize, rules: u32) -> Result<(), OmError> {
    let named = Named { rule: r, rules };
    let at = format!("rules[{i}]");
    if r.id.is_empty() || r.id.chars().count() > MAX_RULE_ID_CHARS {
        return Err(bad(
            "INVALID_RULE_ID",
            format!("{at}.id"),
            named,
            &format!("an id has 1 to {MAX_RULE_ID_CHARS} characters"),
        ));
    }
    if let Some(name) = r.unsupported.first() {
        return Err(bad(
            "UNSUPPORTED_LIFECYCLE_ACTION",
            format!("{at}.{}", name.chars().take(64).collect::<String>()),
            named,
            &format!("om does not run {} actions", quote_in(rules, name)),
        ));
    }
    let tags = match &r.filter {
        Some(f) => filter(f, &at, named)?,
        None => false,
    };
    if r.legacy_prefix
        && !matches!(
            r.filter.as_ref().and_then(|f| f.predicate.as_ref()),
            None | Some(Predicate::Prefix(_))
        )
    {
        return Err(bad(
            "INVALID_FILTER",
            format!("{at}.legacy_prefix"),
            named,
            "a rule in the legacy form filters by a prefix only",
        ));
    }
    let mut actions = 0;
    if let Some(e) = &r.expiration {
        actions += 1;
        let field = format!("{at}.expiration");
        let set = usize::from(e.days.is_some())
            + usize::from(e.date_ms.is_some())
            + usize::from(e.expired_object_delete_marker.is_some());
        if set != 1 {
            return Err(bad(
                "INVALID_EXPIRATION",
                field,
                named,
                "Expiration has exactly one of Days, Date and ExpiredObjectDeleteMarker",
            ));
        }
        if let Some(d) = e.days {
            days(d, format!("{field}.days"), named)?;
        }
        if e.date_ms.is_some_and(|d| d % DAY_MS != 0) {
            return Err(bad(
                "INVALID_DATE",
                format!("{field}.date"),
                named,
                "an expiration date is a midnight UTC",
            ));
        }
        if e.expired_object_delete_marker == Some(true) && tags {
            return Err(bad(
                "INVALID_FILTER",
                format!("{at}.filter"),
                named,
                "ExpiredObjectDeleteMarker cannot be combined with a tag filter",
            ));
        }
    }
    if let Some(n) = &r.noncurrent_version_expiration {
        actions += 1;
        let field = format!("{at}.noncurrent_version_expiration");
        days(n.noncurrent_days, format!("{field}.noncurrent_days"), named)?;
        if n.newer_noncurrent_versions > MAX_NEWER_NONCURRENT_VERSIONS {
            return Err(bad(
                "INVALID_NONCURRENT_VERSIONS",
                format!("{field}.newer_noncurrent_versions"),
                named,
                &format!("NewerNoncurrentVersions is at most {MAX_NEWER_NONCURRENT_VERSIONS}"),
            ));
        }
    }
    if let Some(a) = &r.abort_incomplete_multipart_upload {
        actions += 1;
        days(
            a.days_after_initiation,
            format!("{at}.abort_incomplete_multipart_upload.days_after_initiation"),
            named,
        )?;
        if tags {
            return Err(bad(
                "INVALID_FILTER",
                format!("{at}.filter"),
                named,
                "AbortIncompleteMultipartUpload cannot be combined with a tag filter",
            ));
        }
    }
    if actions == 0 {
        return Err(bad(
            "NO_LIFECYCLE_ACTION",
            at,
            named,
            "a rule needs at least one action",
        ));
    }
    Ok(())
}

/// Checks a whole configuration (the edge on the request, apply on the
/// command: neither depends on state).
pub fn validate(rules: &[LifecycleRule], apply_rules: u32) -> Result<(), OmError> {
    if rules.is_empty() || rules.len() > MAX_RULES {
        return Err(OmError::invalid(
            "INVALID_RULE_COUNT",
            "rules",
            format!(
                "a lifecycle configuration has 1 to {MAX_RULES} rules, got {}",
                rules.len()
            ),
        ));
    }
    let bytes: usize = rules.iter().map(Message::encoded_len).sum();
    if bytes > MAX_CONFIG_BYTES {
        return Err(OmError::invalid(
            "LIFECYCLE_TOO_LARGE",
            "rules",
            format!("the rules take {bytes} bytes; at most {MAX_CONFIG_BYTES}"),
        ));
    }
    let mut ids = std::collections::BTreeSet::new();
    for (i, r) in rules.iter().enumerate() {
        rule(r, i, apply_rules)?;
        if !ids.insert(r.id.as_str()) {
            return Err(bad(
                "DUPLICATE_RULE_ID",
                format!("rules[{i}].id"),
                Named {
                    rule: r,
                    rules: apply_rules,
                },
                "another rule has this id",
            ));
        }
    }
    Ok(())
}

/// S3's checks of a configuration as a request gives it, beyond
/// `validate` (which it runs first): every rule names a `Filter` (an empty
/// one for every object) or the older rule-level `Prefix` (which arrives as
/// a prefix filter). Only the edge runs this; apply does not, since
/// configurations stored before the check existed lack filters.
pub fn validate_request(rules: &[LifecycleRule]) -> Result<(), OmError> {
    validate(rules, crate::rules::CURRENT)?;
    for (i, r) in rules.iter().enumerate() {
        if r.filter.is_none() {
            return Err(bad(
                "INVALID_FILTER",
                format!("rules[{i}].filter"),
                Named {
                    rule: r,
                    rules: crate::rules::CURRENT,
                },
                "a rule needs a Filter (an empty one applies it to every object) or a Prefix",
            ));
        }
    }
    Ok(())
}

/// Gives every rule without an id one, as S3 does: `rule-N` for the N-th
/// rule (counted from 1), with `-2`, `-3`... appended while another rule
/// has that id. A function of the request alone, run at the edge before
/// proposing, so the stored configuration (and a retry of the request) is
/// the same whichever node ran it. Ids already given are kept; duplicates
/// among them are left for `validate` to refuse.
pub fn assign_ids(rules: &mut [LifecycleRule]) {
    if rules.iter().all(|r| !r.id.is_empty()) {
        return;
    }
    let mut taken: std::collections::BTreeSet<String> = rules
        .iter()
        .filter(|r| !r.id.is_empty())
        .map(|r| r.id.clone())
        .collect();
    for (i, r) in rules.iter_mut().enumerate() {
        if !r.id.is_empty() {
            continue;
        }
        let base = format!("rule-{}", i + 1);
        let mut id = base.clone();
        let mut n = 1;
        while taken.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        taken.insert(id.clone());
        r.id = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// `validate` as this binary's apply rules word it.
    fn validate(rules: &[LifecycleRule]) -> Result<(), OmError> {
        super::validate(rules, crate::rules::CURRENT)
    }

    use om_proto::v1::{
        LifecycleAbortUpload, LifecycleAnd, LifecycleExpiration, LifecycleNoncurrentExpiration,
    };

    fn expire(id: &str, days: u32) -> LifecycleRule {
        LifecycleRule {
            id: id.into(),
            enabled: true,
            expiration: Some(LifecycleExpiration {
                days: Some(days),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn expire_marker(id: &str) -> LifecycleRule {
        LifecycleRule {
            id: id.into(),
            enabled: true,
            expiration: Some(LifecycleExpiration {
                expired_object_delete_marker: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn refused(rules: Vec<LifecycleRule>) -> (String, String) {
        match validate(&rules) {
            Err(OmError::Request { reason, field, .. }) => (reason, field),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn s3s_rules_are_enforced() {
        validate(&[expire("a", 1)]).unwrap();
        assert_eq!(refused(vec![]).0, "INVALID_RULE_COUNT");
        assert_eq!(
            refused(
                (0..=MAX_RULES)
                    .map(|i| expire(&format!("r{i}"), 1))
                    .collect()
            )
            .0,
            "INVALID_RULE_COUNT"
        );
        assert_eq!(
            refused(vec![expire("a", 1), expire("a", 2)]),
            ("DUPLICATE_RULE_ID".into(), "rules[1].id".into())
        );
        assert_eq!(refused(vec![expire("", 1)]).0, "INVALID_RULE_ID");
        assert_eq!(
            refused(vec![expire(&"x".repeat(256), 1)]).0,
            "INVALID_RULE_ID"
        );
        validate(&[expire(&"x".repeat(255), 1)]).unwrap();
        assert_eq!(
            refused(vec![expire("a", 0)]),
            ("INVALID_DAYS".into(), "rules[0].expiration.days".into())
        );
        let mut both = expire("a", 3);
        both.expiration
            .as_mut()
            .unwrap()
            .expired_object_delete_marker = Some(true);
        assert_eq!(
            refused(vec![both]),
            ("INVALID_EXPIRATION".into(), "rules[0].expiration".into())
        );
        let mut empty = expire("a", 3);
        empty.expiration.as_mut().unwrap().days = None;
        assert_eq!(refused(vec![empty]).0, "INVALID_EXPIRATION");
        let mut date = expire_marker("a");
        date.expiration = Some(LifecycleExpiration {
            date_ms: Some(1_700_000_000_000),
            ..Default::default()
        });
        assert_eq!(
            refused(vec![date.clone()]),
            ("INVALID_DATE".into(), "rules[0].expiration.date".into())
        );
        date.expiration.as_mut().unwrap().date_ms = Some(19_000 * DAY_MS);
        validate(&[date]).unwrap();
        let none = LifecycleRule {
            id: "a".into(),
            ..Default::default()
        };
        assert_eq!(refused(vec![none]).0, "NO_LIFECYCLE_ACTION");
        let mut transition = expire("t", 1);
        transition.unsupported = vec!["Transitions".into()];
        assert_eq!(refused(vec![transition]).0, "UNSUPPORTED_LIFECYCLE_ACTION");
        let noncurrent = |days, keep| LifecycleRule {
            id: "n".into(),
            noncurrent_version_expiration: Some(LifecycleNoncurrentExpiration {
                noncurrent_days: days,
                newer_noncurrent_versions: keep,
            }),
            ..Default::default()
        };
        validate(&[noncurrent(1, 100)]).unwrap();
        assert_eq!(refused(vec![noncurrent(0, 1)]).0, "INVALID_DAYS");
        assert_eq!(
            refused(vec![noncurrent(1, 101)]).0,
            "INVALID_NONCURRENT_VERSIONS"
        );
        // Tag filters exclude AbortIncompleteMultipartUpload and
        // ExpiredObjectDeleteMarker.
        let tagged = |r: &mut LifecycleRule| {
            r.filter = Some(LifecycleFilter {
                predicate: Some(Predicate::Tag(LifecycleTag {
                    key: "k".into(),
                    value: "v".into(),
                })),
            });
        };
        let mut abort = LifecycleRule {
            id: "u".into(),
            abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                days_after_initiation: 7,
            }),
            ..Default::default()
        };
        validate(std::slice::from_ref(&abort)).unwrap();
        tagged(&mut abort);
        assert_eq!(
            refused(vec![abort]),
            ("INVALID_FILTER".into(), "rules[0].filter".into())
        );
        let mut marker = expire_marker("m");
        validate(std::slice::from_ref(&marker)).unwrap();
        tagged(&mut marker);
        assert_eq!(refused(vec![marker]).0, "INVALID_FILTER");
        // And: two conditions at least, sizes ordered, tags unique.
        let and = |a: LifecycleAnd| {
            let mut r = expire("and", 1);
            r.filter = Some(LifecycleFilter {
                predicate: Some(Predicate::And(a)),
            });
            r
        };
        let t = |k: &str| LifecycleTag {
            key: k.into(),
            value: String::new(),
        };
        validate(&[and(LifecycleAnd {
            prefix: "logs/".into(),
            tags: vec![t("a")],
            ..Default::default()
        })])
        .unwrap();
        assert_eq!(
            refused(vec![and(LifecycleAnd {
                prefix: "logs/".into(),
                ..Default::default()
            })]),
            ("INVALID_FILTER".into(), "rules[0].filter.and".into())
        );
        assert_eq!(
            refused(vec![and(LifecycleAnd {
                object_size_greater_than: Some(10),
                object_size_less_than: Some(10),
                ..Default::default()
            })])
            .1,
            "rules[0].filter.and.object_size_less_than"
        );
        assert_eq!(
            refused(vec![and(LifecycleAnd {
                tags: vec![t("a"), t("a")],
                ..Default::default()
            })])
            .0,
            "INVALID_FILTER"
        );
        assert_eq!(
            refused(vec![and(LifecycleAnd {
                tags: (0..11).map(|i| t(&format!("t{i}"))).collect(),
                ..Default::default()
            })])
            .0,
            "INVALID_FILTER"
        );
        assert_eq!(
            refused(vec![and(LifecycleAnd {
                tags: vec![t(""), t("b")],
                ..Default::default()
            })])
            .0,
            "INVALID_TAG"
        );
    }

    /// Where om once differed from S3: a lone `ExpiredObjectDeleteMarker:
    /// false` is accepted (it does nothing) while an empty `Expiration` and
    /// one that adds it to `Days` are not; a rule with neither `Filter` nor
    /// `Prefix` is refused at the edge, while apply still accepts the
    /// configurations stored before that (they apply to every object).
    #[test]
    fn s3s_acceptance_is_matched() {
        let marker = |m: Option<bool>, days: Option<u32>| LifecycleRule {
            id: "m".into(),
            enabled: true,
            filter: Some(LifecycleFilter::default()),
            expiration: Some(LifecycleExpiration {
                days,
                expired_object_delete_marker: m,
                ..Default::default()
            }),
            ..Default::default()
        };
        validate_request(&[marker(Some(false), None)]).unwrap();
        validate_request(&[marker(Some(true), None)]).unwrap();
        assert_eq!(
            refused(vec![marker(None, None)]),
            ("INVALID_EXPIRATION".into(), "rules[0].expiration".into())
        );
        assert_eq!(
            refused(vec![marker(Some(false), Some(3))]),
            ("INVALID_EXPIRATION".into(), "rules[0].expiration".into())
        );
        let unfiltered = expire("u", 1);
        validate(std::slice::from_ref(&unfiltered)).unwrap();
        match validate_request(&[marker(Some(true), None), unfiltered]) {
            Err(OmError::Request { reason, field, .. }) => {
                assert_eq!(
                    (reason.as_str(), field.as_str()),
                    ("INVALID_FILTER", "rules[1].filter")
                )
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Rules without an id get `rule-N`, made unique against the ids
    /// given; the same request always gets the same ids.
    #[test]
    fn missing_ids_are_assigned_deterministically() {
        let rules = || {
            vec![
                expire("", 1),
                expire("rule-1", 1),
                expire("", 1),
                expire("rule-4", 1),
                expire("", 1),
            ]
        };
        let mut a = rules();
        assign_ids(&mut a);
        let ids: Vec<&str> = a.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["rule-1-2", "rule-1", "rule-3", "rule-4", "rule-5"]);
        validate(&a).unwrap();
        let mut b = rules();
        assign_ids(&mut b);
        assert_eq!(a, b);
        // Ids given are kept, duplicates left for validate to refuse.
        let mut given = vec![expire("x", 1), expire("x", 2)];
        assign_ids(&mut given);
        assert_eq!(given, vec![expire("x", 1), expire("x", 2)]);
        assert_eq!(refused(given).0, "DUPLICATE_RULE_ID");
    }

    #[test]
    fn a_configuration_has_a_byte_limit() {
        let big: Vec<LifecycleRule> = (0..MAX_RULES)
            .map(|i| {
                let mut r = expire(&format!("{i:0>255}"), 1);
                r.filter = Some(LifecycleFilter {
                    predicate: Some(Predicate::Prefix("p".repeat(MAX_KEY_BYTES))),
                });
                r
            })
            .collect();
        assert_eq!(refused(big).0, "LIFECYCLE_TOO_LARGE");
    }

    /// From rules 15 a refusal quotes a rule id once; an older entry keeps
    /// the wording its replicas answered with.
    #[test]
    fn refusals_quote_a_rule_id_once_from_rules_15() {
        let dup = vec![expire("a", 1), expire("a", 2)];
        let msg = |rules| super::validate(&dup, rules).unwrap_err().to_string();
        assert!(msg(15).contains("lifecycle rule \"a\": "), "{}", msg(15));
        assert!(
            msg(14).contains(r#"lifecycle rule "\"a\"": "#),
            "{}",
            msg(14)
        );
    }
}
