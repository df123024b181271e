//! Conditional writes: If-None-Match (`*` or an ETag), If-Match (`*` or an
//! ETag) and an expected update id, checked against the key a write would
//! replace. The `*`-less If-Match and If-None-Match forms came with rules 10;
//! entries of earlier rules never carry them.

use om_proto::store::{DeleteConditions, KeyConditions, KeyRecord};

use crate::error::OmError;

/// Evaluates a write's conditions against the key it would replace.
pub(super) fn check_conditions(
    cond: &KeyConditions,
    current: Option<&KeyRecord>,
    path: &str,
    rules: u32,
) -> Result<(), OmError> {
    if !crate::rules::WRITE_CONDITIONS.holds(rules)
        && (cond.if_match_any || !cond.if_none_match.is_empty())
    {
        return Err(OmError::invalid(
            "UNSUPPORTED_COMMAND",
            "conditions",
            "If-Match: * and If-None-Match with an ETag need apply rules 10",
        ));
    }
    if cond.if_none_match_any && current.is_some() {
        return Err(OmError::precondition(
            "IF_NONE_MATCH_FAILED",
            "conditions.if_none_match_any",
            format!("key {path} exists"),
        ));
    }
    if !cond.if_none_match.is_empty() && current.is_some_and(|k| k.etag == cond.if_none_match) {
        return Err(OmError::precondition(
            "IF_NONE_MATCH_FAILED",
            "conditions.if_none_match",
            format!("key {path} has ETag {:?}", cond.if_none_match),
        ));
    }
    if cond.if_match_any && current.is_none() {
        return Err(OmError::not_found(
            "KEY_NOT_FOUND",
            "conditions.if_match_any",
            format!("key {path} does not exist"),
        ));
    }
    if !cond.if_match.is_empty() {
        match current {
            None => {
                return Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "conditions.if_match",
                    format!("key {path} does not exist"),
                ));
            }
            Some(k) if k.etag != cond.if_match => {
                return Err(OmError::precondition(
                    "IF_MATCH_FAILED",
                    "conditions.if_match",
                    format!("key {path} has ETag {:?}, not {:?}", k.etag, cond.if_match),
                ));
            }
            Some(_) => {}
        }
    }
    if cond.expected_update_id != 0 {
        match current {
            None => {
                return Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "conditions.expected_update_id",
                    format!("key {path} does not exist"),
                ));
            }
            Some(k) if k.update_id != cond.expected_update_id => {
                return Err(OmError::precondition(
                    "UPDATE_ID_MISMATCH",
                    "conditions.expected_update_id",
                    format!(
                        "key {path} was last written at {}, not {}",
                        k.update_id, cond.expected_update_id
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Evaluates a delete's conditions against what it would remove, `target`
/// (a delete marker included). Nothing there: NOT_FOUND `not_found`, so a
/// conditional delete of what is missing changes nothing (it never adds a
/// delete marker). Older entries never carry conditions (rules 15).
pub(super) fn check_delete_conditions(
    cond: Option<&DeleteConditions>,
    target: Option<&KeyRecord>,
    not_found: impl FnOnce() -> OmError,
    path: &str,
    rules: u32,
) -> Result<(), OmError> {
    let Some(cond) = cond else { return Ok(()) };
    if !crate::rules::DELETE_CONDITIONS.holds(rules) {
        return Err(OmError::invalid(
            "UNSUPPORTED_COMMAND",
            "conditions",
            "conditional deletes need apply rules 15",
        ));
    }
    let Some(k) = target else {
        return Err(not_found());
    };
    let failed = |field: &str, what: String| {
        Err(OmError::precondition(
            "IF_MATCH_FAILED",
            field,
            format!("{path} {what}"),
        ))
    };
    if !cond.if_match.is_empty() && k.etag != cond.if_match {
        let has = if k.delete_marker {
            "is a delete marker".to_string()
        } else {
            format!("has ETag {:?}", k.etag)
        };
        return failed(
            "conditions.if_match",
            format!("{has}, not {:?}", cond.if_match),
        );
    }
    if let Some(s) = cond.if_modified_s
        && k.modification_time_ms / 1000 != s
    {
        return failed(
            "conditions.if_modified_s",
            format!(
                "was last modified at second {}, not {s}",
                k.modification_time_ms / 1000
            ),
        );
    }
    if let Some(n) = cond.if_size
        && k.size != n
    {
        return failed(
            "conditions.if_size",
            format!("is {} bytes, not {n}", k.size),
        );
    }
    Ok(())
}
