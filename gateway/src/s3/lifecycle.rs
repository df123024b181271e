//! Bucket lifecycle configuration, kept by om in S3's model
//! (`put_bucket_lifecycle`, `get_bucket_lifecycle`,
//! `delete_bucket_lifecycle`); om's scanner runs the expirations. Actions om
//! does not run (transitions) are passed on as `unsupported`, so om refuses
//! the rule rather than the gateway silently dropping it.

use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::{
    DeleteBucketLifecycleRequest, GetBucketLifecycleRequest, LifecycleAbortUpload, LifecycleAnd,
    LifecycleExpiration as OmExpiration, LifecycleFilter, LifecycleNoncurrentExpiration,
    LifecycleRule as OmRule, LifecycleTag, PutBucketLifecycleRequest,
};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec;
use crate::errors::from_om;

fn days(n: i32, what: &str) -> S3Result<u32> {
    u32::try_from(n).map_err(|_| s3_error!(InvalidArgument, "{what} must not be negative"))
}

fn size(n: i64, what: &str) -> S3Result<u64> {
    u64::try_from(n).map_err(|_| s3_error!(InvalidArgument, "{what} must not be negative"))
}

fn om_tag(t: Tag) -> LifecycleTag {
    LifecycleTag {
        key: t.key.unwrap_or_default(),
        value: t.value.unwrap_or_default(),
    }
}

fn s3_tag(t: LifecycleTag) -> Tag {
    Tag {
        key: Some(t.key),
        value: Some(t.value),
    }
}

/// An S3 filter as om's: at most one predicate (an empty filter: every
/// object).
fn om_filter(f: LifecycleRuleFilter) -> S3Result<LifecycleFilter> {
    let set = [
        f.prefix.is_some(),
        f.tag.is_some(),
        f.object_size_greater_than.is_some(),
        f.object_size_less_than.is_some(),
        f.and.is_some(),
    ];
    if set.iter().filter(|s| **s).count() > 1 {
        return Err(s3_error!(
            MalformedXML,
            "a Filter holds one predicate; combine them with And"
        ));
    }
    let predicate = if let Some(p) = f.prefix {
        Some(Predicate::Prefix(p))
    } else if let Some(t) = f.tag {
        Some(Predicate::Tag(om_tag(t)))
    } else if let Some(n) = f.object_size_greater_than {
        Some(Predicate::ObjectSizeGreaterThan(size(
            n,
            "ObjectSizeGreaterThan",
        )?))
    } else if let Some(n) = f.object_size_less_than {
        Some(Predicate::ObjectSizeLessThan(size(
            n,
            "ObjectSizeLessThan",
        )?))
    } else if let Some(a) = f.and {
        Some(Predicate::And(LifecycleAnd {
            prefix: a.prefix.unwrap_or_default(),
            tags: a.tags.unwrap_or_default().into_iter().map(om_tag).collect(),
            object_size_greater_than: a
                .object_size_greater_than
                .map(|n| size(n, "ObjectSizeGreaterThan"))
                .transpose()?,
            object_size_less_than: a
                .object_size_less_than
                .map(|n| size(n, "ObjectSizeLessThan"))
                .transpose()?,
        }))
    } else {
        None
    };
    Ok(LifecycleFilter { predicate })
}

fn s3_filter(f: LifecycleFilter) -> LifecycleRuleFilter {
    let mut out = LifecycleRuleFilter::default();
    match f.predicate {
        None => {}
        Some(Predicate::Prefix(p)) => out.prefix = Some(p),
        Some(Predicate::Tag(t)) => out.tag = Some(s3_tag(t)),
        Some(Predicate::ObjectSizeGreaterThan(n)) => {
            out.object_size_greater_than = i64::try_from(n).ok();
        }
        Some(Predicate::ObjectSizeLessThan(n)) => out.object_size_less_than = i64::try_from(n).ok(),
        Some(Predicate::And(a)) => {
            out.and = Some(LifecycleRuleAndOperator {
                prefix: (!a.prefix.is_empty()).then_some(a.prefix),
                tags: (!a.tags.is_empty()).then(|| a.tags.into_iter().map(s3_tag).collect()),
                object_size_greater_than: a
                    .object_size_greater_than
                    .and_then(|n| i64::try_from(n).ok()),
                object_size_less_than: a.object_size_less_than.and_then(|n| i64::try_from(n).ok()),
            });
        }
    }
    out
}

/// A transition's time as S3 checks it: Days (not negative) or a Date at
/// midnight UTC, exactly one.
fn transition(days: Option<i32>, date: Option<&Timestamp>) -> S3Result<()> {
    match (days, date) {
        (Some(d), None) if d >= 0 => Ok(()),
        (Some(_), None) => Err(s3_error!(
            InvalidArgument,
            "a Transition's Days must not be negative"
        )),
        (None, Some(t)) if codec::ms(t).is_multiple_of(86_400_000) => Ok(()),
        (None, Some(_)) => Err(s3_error!(
            InvalidArgument,
            "a Transition's Date must be at midnight GMT"
        )),
        _ => Err(s3_error!(
            MalformedXML,
            "a Transition has exactly one of Days and Date"
        )),
    }
}

/// An S3 rule as om's.
pub(super) fn om_rule(r: LifecycleRule) -> S3Result<OmRule> {
    let legacy_prefix = r.prefix.is_some();
    let filter = match (r.filter, r.prefix) {
        (Some(f), None) => Some(om_filter(f)?),
        (None, Some(p)) => Some(LifecycleFilter {
            predicate: Some(Predicate::Prefix(p)),
        }),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                MalformedXML,
                "a rule has a Filter or a Prefix, not both"
            ));
        }
    };
    let expiration = match r.expiration {
        None => None,
        Some(e) => Some(OmExpiration {
            days: e.days.map(|d| days(d, "Days")).transpose()?,
            date_ms: e.date.as_ref().map(codec::ms),
            expired_object_delete_marker: e.expired_object_delete_marker,
        }),
    };
    let noncurrent = match r.noncurrent_version_expiration {
        None => None,
        Some(n) => Some(LifecycleNoncurrentExpiration {
            noncurrent_days: days(n.noncurrent_days.unwrap_or(0), "NoncurrentDays")?,
            newer_noncurrent_versions: days(
                n.newer_noncurrent_versions.unwrap_or(0),
                "NewerNoncurrentVersions",
            )?,
        }),
    };
    let abort = match r.abort_incomplete_multipart_upload {
        None => None,
        Some(a) => Some(LifecycleAbortUpload {
            days_after_initiation: days(
                a.days_after_initiation.unwrap_or(0),
                "DaysAfterInitiation",
            )?,
        }),
    };
    let mut unsupported = Vec::new();
    if let Some(ts) = r.transitions.filter(|t| !t.is_empty()) {
        // om runs no transition, but one S3 itself would refuse is a 400
        // for what is wrong with it, not a 501.
        for t in &ts {
            transition(t.days, t.date.as_ref())?;
        }
        unsupported.push("Transition".to_string());
    }
    if r.noncurrent_version_transitions
        .is_some_and(|t| !t.is_empty())
    {
        unsupported.push("NoncurrentVersionTransition".to_string());
    }
    // Status is exactly Enabled or Disabled (S3 refuses "enabled").
    let enabled = match r.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "a rule's Status is Enabled or Disabled"
            ));
        }
    };
    Ok(OmRule {
        id: r.id.unwrap_or_default(),
        enabled,
        filter,
        expiration,
        noncurrent_version_expiration: noncurrent,
        abort_incomplete_multipart_upload: abort,
        unsupported,
        legacy_prefix,
    })
}

/// om's rule as S3's.
pub(super) fn s3_rule(r: OmRule) -> LifecycleRule {
    let as_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    LifecycleRule {
        id: (!r.id.is_empty()).then_some(r.id),
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        // Returned in the form it was given: the older top-level Prefix, or
        // a Filter.
        filter: (!r.legacy_prefix).then(|| s3_filter(r.filter.clone().unwrap_or_default())),
        prefix: r
            .legacy_prefix
            .then(|| match r.filter.and_then(|f| f.predicate) {
                Some(Predicate::Prefix(p)) => p,
                _ => String::new(),
            }),
        expiration: r.expiration.map(|e| LifecycleExpiration {
            days: e.days.map(as_i32),
            date: e.date_ms.map(codec::ts),
            expired_object_delete_marker: e.expired_object_delete_marker,
        }),
        noncurrent_version_expiration: r.noncurrent_version_expiration.map(|n| {
            NoncurrentVersionExpiration {
                noncurrent_days: Some(as_i32(n.noncurrent_days)),
                newer_noncurrent_versions: (n.newer_noncurrent_versions > 0)
                    .then(|| as_i32(n.newer_noncurrent_versions)),
            }
        }),
        abort_incomplete_multipart_upload: r.abort_incomplete_multipart_upload.map(|a| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(as_i32(a.days_after_initiation)),
            }
        }),
        transitions: None,
        noncurrent_version_transitions: None,
    }
}

pub async fn put(
    s: &OmS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let Some(cfg) = i.lifecycle_configuration else {
        return Err(s3_error!(MalformedXML, "no LifecycleConfiguration"));
    };
    let rules = cfg
        .rules
        .into_iter()
        .map(om_rule)
        .collect::<S3Result<Vec<_>>>()?;
    om.put_bucket_lifecycle(PutBucketLifecycleRequest {
        header: None,
        volume: s.volume.clone(),
        bucket: i.bucket,
        rules,
    })
    .await
    .map_err(from_om)?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub async fn get(
    s: &OmS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let om = s.om(&req).await?;
    let r = om
        .get_bucket_lifecycle(GetBucketLifecycleRequest {
            read: None,
            volume: s.volume.clone(),
            bucket: req.input.bucket,
        })
        .await
        .map_err(from_om)?;
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(r.rules.into_iter().map(s3_rule).collect()),
        ..Default::default()
    }))
}

pub async fn delete(
    s: &OmS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let om = s.om(&req).await?;
    om.delete_bucket_lifecycle(DeleteBucketLifecycleRequest {
        header: None,
        volume: s.volume.clone(),
        bucket: req.input.bucket,
    })
    .await
    .map_err(from_om)?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn rule() -> LifecycleRule {
        LifecycleRule {
            id: Some("r1".into()),
            status: ExpirationStatus::from_static(ExpirationStatus::ENABLED),
            filter: Some(LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: Some("logs/".into()),
                    tags: Some(vec![Tag {
                        key: Some("k".into()),
                        value: Some("v".into()),
                    }]),
                    object_size_greater_than: Some(10),
                    object_size_less_than: None,
                }),
                ..Default::default()
            }),
            expiration: Some(LifecycleExpiration {
                days: Some(30),
                ..Default::default()
            }),
            noncurrent_version_expiration: Some(NoncurrentVersionExpiration {
                noncurrent_days: Some(7),
                newer_noncurrent_versions: Some(2),
            }),
            abort_incomplete_multipart_upload: Some(AbortIncompleteMultipartUpload {
                days_after_initiation: Some(3),
            }),
            prefix: None,
            transitions: None,
            noncurrent_version_transitions: None,
        }
    }

    #[test]
    fn rules_round_trip() {
        let om = om_rule(rule()).unwrap();
        assert!(om.enabled);
        assert_eq!(om.expiration.as_ref().unwrap().days, Some(30));
        assert!(om.unsupported.is_empty());
        match &om.filter.as_ref().unwrap().predicate {
            Some(Predicate::And(a)) => {
                assert_eq!(a.prefix, "logs/");
                assert_eq!(a.tags.len(), 1);
                assert_eq!(a.object_size_greater_than, Some(10));
            }
            other => panic!("{other:?}"),
        }
        let back = s3_rule(om);
        assert_eq!(back.id.as_deref(), Some("r1"));
        assert_eq!(back.status.as_str(), ExpirationStatus::ENABLED);
        let and = back.filter.unwrap().and.unwrap();
        assert_eq!(and.prefix.as_deref(), Some("logs/"));
        assert_eq!(
            back.noncurrent_version_expiration
                .unwrap()
                .newer_noncurrent_versions,
            Some(2)
        );
        assert_eq!(
            back.abort_incomplete_multipart_upload
                .unwrap()
                .days_after_initiation,
            Some(3)
        );
    }

    #[test]
    fn legacy_prefix_transitions_and_bad_filters() {
        let mut r = rule();
        r.filter = None;
        r.prefix = Some("old/".into());
        r.transitions = Some(vec![Transition {
            days: Some(30),
            ..Default::default()
        }]);
        let om = om_rule(r.clone()).unwrap();
        // A transition S3 would refuse is a 400 for its fault, not a 501.
        let midnight =
            Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400));
        let past =
            Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_secs(20_220_927));
        for (days, date, code) in [
            (None, Some(past), S3ErrorCode::InvalidArgument),
            (Some(-1), None, S3ErrorCode::InvalidArgument),
            (None, None, S3ErrorCode::MalformedXML),
            (Some(1), Some(midnight.clone()), S3ErrorCode::MalformedXML),
        ] {
            let mut bad = r.clone();
            bad.transitions = Some(vec![Transition {
                days,
                date,
                ..Default::default()
            }]);
            assert_eq!(*om_rule(bad).unwrap_err().code(), code);
        }
        let mut at_midnight = r.clone();
        at_midnight.transitions = Some(vec![Transition {
            date: Some(midnight),
            ..Default::default()
        }]);
        assert_eq!(om_rule(at_midnight).unwrap().unsupported, ["Transition"]);
        assert_eq!(
            om.filter.as_ref().unwrap().predicate,
            Some(Predicate::Prefix("old/".into()))
        );
        assert!(om.legacy_prefix);
        assert_eq!(om.unsupported, vec!["Transition".to_string()]);
        // Returned in the form it was given.
        let back = s3_rule(om);
        assert_eq!((back.prefix.as_deref(), back.filter), (Some("old/"), None));
        let back = s3_rule(om_rule(rule()).unwrap());
        assert!(back.prefix.is_none() && back.filter.is_some());

        let mut r = rule();
        r.filter = Some(LifecycleRuleFilter {
            prefix: Some("a".into()),
            object_size_less_than: Some(5),
            ..Default::default()
        });
        assert!(om_rule(r).is_err());

        let mut r = rule();
        r.expiration = Some(LifecycleExpiration {
            days: Some(-1),
            ..Default::default()
        });
        assert!(om_rule(r).is_err());
    }
}
