//! Conditional writes: If-None-Match, If-Match and an expected update id,
//! checked against the key a write would replace.

use om_proto::store::{KeyConditions, KeyRecord};

use crate::error::OmError;

/// Evaluates a write's conditions against the key it would replace.
pub(super) fn check_conditions(
    cond: &KeyConditions,
    current: Option<&KeyRecord>,
    path: &str,
) -> Result<(), OmError> {
    if cond.if_none_match_any && current.is_some() {
        return Err(OmError::precondition(
            "IF_NONE_MATCH_FAILED",
            "conditions.if_none_match_any",
            format!("key {path} exists"),
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
