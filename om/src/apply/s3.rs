//! S3 credentials (rules 9): CreateS3Secret and RevokeS3Secret; from rules
//! 14 secrets sealed at rest (`crate::secrets`) and ResealS3Secrets.
//!
//! A credential is an access key (public, names it) and a secret key (what
//! signatures are made with), acting for one user and, when an admin gave
//! them, that user's groups. The leader draws both keys before proposing;
//! apply only stores what the command carries. Who may do what depends on
//! the credential's user, so the rights are checked here
//! (`check_caller`), on the state as of the entry, and by the leader before
//! proposing, with the same function.

use om_proto::store::{
    Caller, CommandResult, CountResult, CreateS3Secret, ResealS3Secrets, RevokeS3Secret,
    S3SecretRecord, SealedSecret, command_result,
};
use om_raft_store::EntryWrites;

use super::ops::Operation;
use super::{Ctx, ok};
use crate::authz;
use crate::authz::Resource;
use crate::error::OmError;
pub use crate::limits::MAX_SECRETS_PER_USER;
use crate::store::keys;
use crate::store::table::{self, S3SecretTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::CreateS3Secret {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        // Depend on the credential's user: `check_caller`.
        vec![]
    }

    fn check_caller(&self, db: &(impl StateRead + ?Sized), c: &Caller) -> Result<(), OmError> {
        may_manage(db, c, &self.user, &self.groups)
    }

    fn target(&self) -> String {
        // The access key is public; the secret never appears.
        format!("/s3-secrets/{}", self.access_key)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        access_key(&self.access_key)?;
        if let Some(s) = &self.sealed {
            sealed_rules(rules)?;
            if !self.secret_key.is_empty() {
                return Err(OmError::invalid(
                    "INVALID_SECRET_KEY",
                    "secret_key",
                    "a sealed secret's credential carries no plain secret",
                ));
            }
            sealed("sealed", s)?;
        } else if !valid_secret_key(&self.secret_key) {
            return Err(OmError::invalid(
                "INVALID_SECRET_KEY",
                "secret_key",
                "a secret key is 40 characters of [A-Za-z0-9+/]",
            ));
        }
        check_user("user", &self.user)?;
        check_groups(&self.groups)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_s3_secret(b, self)
    }
}

impl Operation for om_proto::store::ResealS3Secrets {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        "/s3-secrets".to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        sealed_rules(rules)?;
        if self.items.is_empty() || self.items.len() > MAX_RESEAL_ITEMS {
            return Err(OmError::invalid(
                "INVALID_ITEMS",
                "items",
                format!("1 to {MAX_RESEAL_ITEMS} credentials per command"),
            ));
        }
        for (i, r) in self.items.iter().enumerate() {
            if !valid_access_key(&r.access_key)
                || self.items[..i].iter().any(|o| o.access_key == r.access_key)
            {
                return Err(OmError::invalid(
                    "INVALID_ACCESS_KEY",
                    format!("items[{i}].access_key"),
                    "an access key is OM and 18 characters of [A-Z0-9], once per command",
                ));
            }
            if let Some(x) = &r.expect {
                sealed(&format!("items[{i}].expect"), x)?;
            }
            let s = r.sealed.as_ref().ok_or_else(|| {
                OmError::invalid(
                    "INVALID_SEALED_SECRET",
                    format!("items[{i}].sealed"),
                    "missing",
                )
            })?;
            sealed(&format!("items[{i}].sealed"), s)?;
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.reseal_s3_secrets(b, self)
    }
}

impl Operation for om_proto::store::RevokeS3Secret {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        // Depend on the credential's user: `check_caller`.
        vec![]
    }

    fn check_caller(&self, db: &(impl StateRead + ?Sized), c: &Caller) -> Result<(), OmError> {
        match get(db, &self.access_key)? {
            // Missing: the handler reports it.
            None => Ok(()),
            Some(rec) => may_manage(db, c, &rec.user, &[]),
        }
    }

    fn target(&self) -> String {
        format!("/s3-secrets/{}", self.access_key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        access_key(&self.access_key)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.revoke_s3_secret(b, self)
    }
}

/// Most credentials one ResealS3Secrets carries.
pub const MAX_RESEAL_ITEMS: usize = 256;

fn sealed_rules(rules: u32) -> Result<(), OmError> {
    if !crate::rules::SEALED_SECRETS.holds(rules) {
        return Err(OmError::invalid(
            "UNSUPPORTED_COMMAND",
            "op",
            "sealed S3 secrets need apply rules 14",
        ));
    }
    Ok(())
}

/// A sealed secret's shape: a key id, a 12-byte nonce, and a secret key's
/// length of ciphertext with its tag.
fn sealed(field: &str, s: &SealedSecret) -> Result<(), OmError> {
    if !crate::secrets::well_formed(s, SECRET_KEY_LEN) {
        return Err(OmError::invalid(
            "INVALID_SEALED_SECRET",
            field,
            format!(
                "a sealed secret names a key (1 to {} characters of [A-Za-z0-9._-]) and carries                  a 12-byte nonce and {} bytes of ciphertext",
                crate::secrets::MAX_KEY_ID_LEN,
                SECRET_KEY_LEN + 16
            ),
        ));
    }
    Ok(())
}

/// Characters of an access key: `OM` and 18 of `[A-Z0-9]`.
pub const ACCESS_KEY_LEN: usize = 20;
/// What every access key om makes starts with.
pub const ACCESS_KEY_PREFIX: &str = "OM";
/// Characters of a secret key, each of `[A-Za-z0-9+/]` (240 bits).
pub const SECRET_KEY_LEN: usize = 40;

/// Whether `k` is an access key om could have made.
pub fn valid_access_key(k: &str) -> bool {
    k.len() == ACCESS_KEY_LEN
        && k.starts_with(ACCESS_KEY_PREFIX)
        && k.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Whether `k` is a secret key om could have made.
pub fn valid_secret_key(k: &str) -> bool {
    k.len() == SECRET_KEY_LEN
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// An access key field: `OM` and 18 characters of `[A-Z0-9]`.
fn access_key(k: &str) -> Result<(), OmError> {
    if !valid_access_key(k) {
        return Err(OmError::invalid(
            "INVALID_ACCESS_KEY",
            "access_key",
            "an access key is OM and 18 characters of [A-Z0-9]",
        ));
    }
    Ok(())
}

/// A user name a credential may act for.
pub fn check_user(field: &str, user: &str) -> Result<(), OmError> {
    if authz::valid_name(user) {
        Ok(())
    } else {
        Err(OmError::invalid(
            "INVALID_USER",
            field,
            "a user name is 1 to 256 bytes without whitespace, control characters, ',' or ':'",
        ))
    }
}

/// A credential's groups: at most `authz::MAX_GROUPS` valid, distinct names.
pub fn check_groups(groups: &[String]) -> Result<(), OmError> {
    if groups.len() > authz::MAX_GROUPS {
        return Err(OmError::invalid(
            "INVALID_GROUPS",
            "groups",
            format!("at most {} groups", authz::MAX_GROUPS),
        ));
    }
    for (i, g) in groups.iter().enumerate() {
        if !authz::valid_name(g) || groups[..i].contains(g) {
            return Err(OmError::invalid(
                "INVALID_GROUPS",
                format!("groups[{i}]"),
                "a group name is 1 to 256 bytes without whitespace, control characters, ',' or ':', and appears once",
            ));
        }
    }
    Ok(())
}

/// The credential stored under `access_key`, if any.
pub fn get(
    db: &(impl StateRead + ?Sized),
    access_key: &str,
) -> Result<Option<S3SecretRecord>, OmError> {
    table::get::<S3SecretTable>(db, &keys::s3_secret_key(access_key))
}

/// How many credentials `user` holds (stops counting past the limit).
fn count_for(db: &(impl StateRead + ?Sized), user: &str) -> Result<usize, OmError> {
    let prefix = keys::s3_user_prefix(user);
    let mut it = db.iter_prefix(keys::S3_SECRETS_CF, &prefix)?;
    let mut n = 0;
    while it.current().is_some() && n <= MAX_SECRETS_PER_USER {
        n += 1;
        it.advance();
    }
    it.status()?;
    Ok(n)
}

/// Whether `caller` may create or revoke credentials of `user`: an admin
/// anyone's, anyone their own (an impersonator acting for the user counts
/// as the user); only an admin may give groups.
fn may_manage(
    db: &(impl StateRead + ?Sized),
    caller: &Caller,
    user: &str,
    groups: &[String],
) -> Result<(), OmError> {
    if authz::is_admin(db, caller)? {
        return Ok(());
    }
    if caller.user == user && groups.is_empty() {
        return Ok(());
    }
    Err(OmError::Denied {
        right: "ALL".to_string(),
        resource: "/".to_string(),
        message: if caller.user == user {
            "only a cluster admin may give a credential groups".to_string()
        } else {
            format!(
                "only a cluster admin may manage the S3 credentials of {:?}",
                crate::validate::quote_prefix(user)
            )
        },
    })
}

fn not_found(access_key: &str) -> OmError {
    OmError::not_found(
        "S3_SECRET_NOT_FOUND",
        "access_key",
        format!("no S3 credential {access_key:?}"),
    )
}

/// A stored credential without its secret, as results that are not
/// CreateS3Secret's carry it.
pub fn without_secret(mut r: S3SecretRecord) -> S3SecretRecord {
    r.secret_key.clear();
    r.sealed = None;
    r
}

impl Ctx<'_> {
    fn s3_rules(&self) -> Result<(), OmError> {
        if !crate::rules::S3_CREDENTIALS.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "S3 credentials need apply rules 9",
            ));
        }
        Ok(())
    }

    pub(super) fn create_s3_secret(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CreateS3Secret,
    ) -> Result<CommandResult, OmError> {
        self.s3_rules()?;
        if get(self.db, &c.access_key)?.is_some() {
            return Err(OmError::exists(
                "S3_SECRET_EXISTS",
                "access_key",
                format!("S3 credential {:?} exists", c.access_key),
            ));
        }
        if count_for(self.db, &c.user)? >= MAX_SECRETS_PER_USER {
            return Err(OmError::precondition(
                "TOO_MANY_S3_SECRETS",
                "user",
                format!(
                    "{:?} holds {MAX_SECRETS_PER_USER} S3 credentials, the most one user may; revoke one first",
                    crate::validate::quote_prefix(&c.user)
                ),
            ));
        }
        let mut rec = S3SecretRecord {
            format: 0,
            access_key: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            user: c.user.clone(),
            groups: c.groups.clone(),
            created_ms: self.now,
            sealed: c.sealed.clone(),
        };
        table::put::<S3SecretTable>(self.db, b, &keys::s3_secret_key(&c.access_key), &mut rec)?;
        b.put_cf(
            table::cf(self.db.rocks(), keys::S3_SECRETS_CF)?,
            keys::s3_user_index_key(&c.user, &c.access_key),
            [],
        );
        ok(command_result::Result::S3Secret(rec))
    }

    /// Seals each credential that still holds what its item expects.
    pub(super) fn reseal_s3_secrets(
        &self,
        b: &mut EntryWrites<'_>,
        r: &ResealS3Secrets,
    ) -> Result<CommandResult, OmError> {
        self.s3_rules()?;
        let mut count = 0;
        for item in &r.items {
            // Items name distinct credentials (`limits`).
            let key = keys::s3_secret_key(&item.access_key);
            let Some(mut rec) = table::get::<S3SecretTable>(self.db, &key)? else {
                continue;
            };
            if rec.sealed != item.expect {
                continue;
            }
            rec.secret_key.clear();
            rec.sealed = item.sealed.clone();
            table::put::<S3SecretTable>(self.db, b, &key, &mut rec)?;
            count += 1;
        }
        ok(command_result::Result::Count(CountResult { count }))
    }

    pub(super) fn revoke_s3_secret(
        &self,
        b: &mut EntryWrites<'_>,
        r: &RevokeS3Secret,
    ) -> Result<CommandResult, OmError> {
        self.s3_rules()?;
        let rec = get(self.db, &r.access_key)?.ok_or_else(|| not_found(&r.access_key))?;
        table::delete::<S3SecretTable>(self.db, b, &keys::s3_secret_key(&r.access_key))?;
        b.delete_cf(
            table::cf(self.db.rocks(), keys::S3_SECRETS_CF)?,
            keys::s3_user_index_key(&rec.user, &r.access_key),
        );
        ok(command_result::Result::S3Secret(without_secret(rec)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use om_proto::store::command::Op;

    #[test]
    fn key_formats() {
        assert!(valid_access_key("OMABCDEFGHIJ01234567"));
        assert!(!valid_access_key("OMabcdefghij01234567"));
        assert!(!valid_access_key("XXABCDEFGHIJ01234567"));
        assert!(!valid_access_key("OMABC"));
        assert!(valid_secret_key(&"aZ09+/".repeat(7)[..40]));
        assert!(!valid_secret_key(&"a".repeat(39)));
        assert!(!valid_secret_key(&format!("{}-", "a".repeat(39))));
    }

    #[test]
    fn groups_are_checked() {
        assert!(check_groups(&["ops".into(), "dev".into()]).is_ok());
        assert!(check_groups(&["ops".into(), "ops".into()]).is_err());
        assert!(check_groups(&["a b".into()]).is_err());
        let many: Vec<String> = (0..=authz::MAX_GROUPS).map(|i| format!("g{i}")).collect();
        assert!(check_groups(&many).is_err());
    }

    fn create(n: usize, user: &str) -> Op {
        Op::CreateS3Secret(CreateS3Secret {
            access_key: format!("OM{n:018}"),
            secret_key: "s".repeat(SECRET_KEY_LEN),
            user: user.into(),
            groups: vec![],
            sealed: None,
        })
    }

    fn sealed(key_id: &str, fill: u8) -> SealedSecret {
        SealedSecret {
            key_id: key_id.into(),
            nonce: vec![fill; 12],
            ciphertext: vec![fill; SECRET_KEY_LEN + 16],
        }
    }

    fn reseal(items: Vec<(usize, Option<SealedSecret>, SealedSecret)>) -> Op {
        Op::ResealS3Secrets(ResealS3Secrets {
            items: items
                .into_iter()
                .map(|(n, expect, s)| om_proto::store::Reseal {
                    access_key: format!("OM{n:018}"),
                    expect,
                    sealed: Some(s),
                })
                .collect(),
        })
    }

    /// A sealed create stores no plain secret; a reseal replaces only what
    /// it expects (plain text, or one sealed secret) and skips the rest;
    /// malformed sealed secrets and older rules are refused.
    #[test]
    fn sealed_secrets_are_stored_and_resealed_only_as_expected() {
        let mut sm = crate::apply::tests::Sm::new();
        sm.ok(create(1, "alice"));
        let Op::CreateS3Secret(mut c) = create(2, "alice") else {
            unreachable!()
        };
        c.secret_key.clear();
        c.sealed = Some(sealed("k1", 1));
        assert_eq!(
            sm.rejected_rules(Op::CreateS3Secret(c.clone()), 13),
            "UNSUPPORTED_COMMAND"
        );
        let mut short = c.clone();
        short.sealed.as_mut().unwrap().ciphertext.pop();
        assert_eq!(
            sm.rejected(Op::CreateS3Secret(short)),
            "INVALID_SEALED_SECRET"
        );
        match sm.ok(Op::CreateS3Secret(c)) {
            command_result::Result::S3Secret(r) => {
                assert!(r.secret_key.is_empty());
                assert_eq!(r.sealed, Some(sealed("k1", 1)));
            }
            other => panic!("{other:?}"),
        }
        // 1 is plain, 2 sealed as 1; 3 does not exist.
        let op = reseal(vec![
            (1, None, sealed("k2", 7)),
            (2, Some(sealed("k1", 9)), sealed("k2", 8)),
            (3, None, sealed("k2", 6)),
        ]);
        assert_eq!(sm.rejected_rules(op.clone(), 13), "UNSUPPORTED_COMMAND");
        match sm.ok(op) {
            command_result::Result::Count(n) => assert_eq!(n.count, 1),
            other => panic!("{other:?}"),
        }
        let one = get(&sm.db, &format!("OM{:018}", 1)).unwrap().unwrap();
        assert_eq!(
            (one.secret_key.as_str(), one.sealed),
            ("", Some(sealed("k2", 7)))
        );
        match sm.ok(reseal(vec![(2, Some(sealed("k1", 1)), sealed("k2", 8))])) {
            command_result::Result::Count(n) => assert_eq!(n.count, 1),
            other => panic!("{other:?}"),
        }
        let twice = reseal(vec![(1, None, sealed("k2", 7)), (1, None, sealed("k2", 7))]);
        assert_eq!(sm.rejected(twice), "INVALID_ACCESS_KEY");
        assert_eq!(sm.rejected(reseal(vec![])), "INVALID_ITEMS");
    }

    /// Apply stores exactly what the command carries, answers a user's
    /// limit and a second revoke with rejections that stage nothing, and
    /// refuses the commands under rules before 9.
    #[test]
    fn credentials_are_stored_limited_and_revoked() {
        let mut sm = crate::apply::tests::Sm::new();
        assert_eq!(
            sm.rejected_rules(create(0, "alice"), 8),
            "UNSUPPORTED_COMMAND"
        );
        let now = sm.next_now();
        match sm.ok(create(0, "alice")) {
            command_result::Result::S3Secret(r) => {
                assert_eq!(r.secret_key, "s".repeat(SECRET_KEY_LEN));
                assert_eq!((r.user.as_str(), r.created_ms), ("alice", now));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(sm.rejected(create(0, "bob")), "S3_SECRET_EXISTS");
        for n in 1..MAX_SECRETS_PER_USER {
            sm.ok(create(n, "alice"));
        }
        assert_eq!(
            sm.rejected(create(MAX_SECRETS_PER_USER, "alice")),
            "TOO_MANY_S3_SECRETS"
        );
        sm.ok(create(MAX_SECRETS_PER_USER, "bob"));
        let revoke = || {
            Op::RevokeS3Secret(RevokeS3Secret {
                access_key: format!("OM{:018}", 0),
            })
        };
        match sm.ok(revoke()) {
            command_result::Result::S3Secret(r) => assert!(r.secret_key.is_empty()),
            other => panic!("{other:?}"),
        }
        assert_eq!(sm.rejected(revoke()), "S3_SECRET_NOT_FOUND");
        assert!(get(&sm.db, &format!("OM{:018}", 0)).unwrap().is_none());
        // The freed slot can be used again; the index followed the revoke.
        sm.ok(create(100, "alice"));
        assert_eq!(count_for(&sm.db, "alice").unwrap(), MAX_SECRETS_PER_USER);
        assert_eq!(count_for(&sm.db, "bob").unwrap(), 1);
    }

    /// A non-admin caller manages only their own credentials, without groups.
    #[test]
    fn callers_manage_their_own() {
        let mut sm = crate::apply::tests::Sm::new();
        let (r, staged) = sm.apply_as("alice", create(1, "bob"));
        assert_eq!(staged, 0);
        assert!(matches!(
            crate::apply::into_outcome(r),
            Err(OmError::Denied { .. })
        ));
        let with_groups = Op::CreateS3Secret(CreateS3Secret {
            groups: vec!["eng".into()],
            ..match create(2, "alice") {
                Op::CreateS3Secret(c) => c,
                _ => unreachable!(),
            }
        });
        assert!(matches!(
            crate::apply::into_outcome(sm.apply_as("alice", with_groups).0),
            Err(OmError::Denied { .. })
        ));
        assert!(crate::apply::into_outcome(sm.apply_as("alice", create(3, "alice")).0).is_ok());
        let revoke = Op::RevokeS3Secret(RevokeS3Secret {
            access_key: format!("OM{:018}", 3),
        });
        assert!(matches!(
            crate::apply::into_outcome(sm.apply_as("bob", revoke.clone()).0),
            Err(OmError::Denied { .. })
        ));
        assert!(crate::apply::into_outcome(sm.apply_as("alice", revoke).0).is_ok());
    }
}
