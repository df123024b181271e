//! S3 credentials: making new keys (the leader's part of CreateS3Secret)
//! and the reads GetS3Secret and ListS3Secrets.
//!
//! A gateway verifying a signature needs the secret key itself (SigV4 is an
//! HMAC), so GetS3Secret returns it, to admins, holders of IMPERSONATE on
//! the cluster (gateways) and the credential's own user. Listings never
//! carry secrets. At rest (the table, the log, the retry cache, backups)
//! a secret is sealed under `--secrets-key-file` (`crate::secrets`): the
//! node that draws it seals it before proposing, and readers open it.

use om_proto::store::command::Op;
use om_proto::store::{
    Caller, Reseal, ResealS3Secrets, S3SecretRecord, SealedSecret, command_result,
};
use rand::Rng;

use super::{Consistency, OmService, item_len};
use crate::apply::s3::{self as creds, ACCESS_KEY_LEN, ACCESS_KEY_PREFIX, SECRET_KEY_LEN};
use crate::authz::{self, IMPERSONATE, Resource};
use crate::error::OmError;
pub use crate::limits::MAX_S3_SECRETS_PAGE;
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, S3SecretTable};

/// A new (access key, secret key): `OM` and 18 of `[A-Z0-9]` (93 bits),
/// and 40 of `[A-Za-z0-9+/]` (240 bits), from the OS-seeded thread RNG.
pub fn new_s3_keys() -> (String, String) {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = rand::rng();
    let mut pick = |set: &[u8], n: usize| -> String {
        (0..n)
            .map(|_| set[rng.random_range(0..set.len())] as char)
            .collect()
    };
    let access = format!(
        "{ACCESS_KEY_PREFIX}{}",
        pick(UPPER, ACCESS_KEY_LEN - ACCESS_KEY_PREFIX.len())
    );
    let secret = pick(ANY, SECRET_KEY_LEN);
    (access, secret)
}

/// What sealing stored secrets anew did.
#[derive(Debug, Default)]
pub struct Resealed {
    /// The key they are sealed under now.
    pub key_id: String,
    pub resealed: u64,
    pub unchanged: u64,
    /// Credentials under a key the file lacks (at most `MAX_UNREADABLE`).
    pub unreadable: Vec<String>,
}

/// Most unreadable credentials a rotation names.
pub const MAX_UNREADABLE: usize = 100;

/// A page of credentials (secrets cleared) and whether more follow.
pub struct S3SecretsPage {
    pub credentials: Vec<S3SecretRecord>,
    pub truncated: bool,
}

impl OmService {
    /// A new secret as a command carries it: sealed under the current key,
    /// or in plain text where that is allowed (`--insecure`).
    pub fn seal_new(
        &self,
        access_key: &str,
        user: &str,
        secret: String,
    ) -> Result<(String, Option<SealedSecret>), OmError> {
        match &self.keyring {
            Some(k) => Ok((
                String::new(),
                Some(k.keys().seal(access_key, user, &secret)?),
            )),
            None if self.plaintext_secrets => Ok((secret, None)),
            None => Err(OmError::precondition(
                "SECRETS_KEY_REQUIRED",
                "user",
                "this node has no --secrets-key-file to seal S3 secrets under; give every \
                 member one (omctl s3 secret new-key), or pass --insecure to store them in plain \
                 text",
            )),
        }
    }

    /// The secret of a stored credential, opened if sealed.
    pub fn secret_of(&self, r: &S3SecretRecord) -> Result<String, OmError> {
        crate::secrets::Keyring::secret_of(self.keyring.as_deref(), r)
    }

    /// Seals stored secrets under the current key: those in plain text, and
    /// unless `only_plaintext` those under older keys. `internal`: proposed
    /// as the node itself (the leader's start-up task), else as the caller
    /// (an admin; apply checks it again).
    pub async fn reseal_s3_secrets(
        &self,
        only_plaintext: bool,
        internal: bool,
    ) -> Result<Resealed, OmError> {
        let Some(keyring) = &self.keyring else {
            return Err(OmError::precondition(
                "SECRETS_KEY_REQUIRED",
                "header",
                "this node has no --secrets-key-file to seal S3 secrets under",
            ));
        };
        if !internal {
            self.read_barrier(Consistency::Linearizable).await?;
            let (caller, rights) = self.cluster_caller()?;
            if let Some(c) = caller
                && rights & authz::ALL != authz::ALL
            {
                return Err(OmError::Denied {
                    right: "ALL".to_string(),
                    resource: Resource::Cluster.to_string(),
                    message: format!(
                        "{} may not rotate the S3 secrets key (admins only)",
                        crate::validate::quote_prefix(&c.user)
                    ),
                });
            }
        }
        let keys = keyring.keys();
        let mut out = Resealed {
            key_id: keys.current().to_string(),
            ..Resealed::default()
        };
        let mut from = Vec::new();
        loop {
            let (items, last) = self.reseal_page(&from, &keys, only_plaintext, &mut out)?;
            let Some(mut next) = last else { break };
            next.push(0);
            from = next;
            if items.is_empty() {
                continue;
            }
            let op = Op::ResealS3Secrets(ResealS3Secrets { items });
            let r = if internal {
                self.propose_here(super::WriteId::default(), op).await?
            } else {
                self.propose(super::WriteId::default(), op).await?
            };
            match r {
                command_result::Result::Count(c) => out.resealed += c.count,
                other => {
                    return Err(OmError::Internal(format!(
                        "ResealS3Secrets answered {other:?}"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// How this replica's credentials are stored: in plain text, under the
    /// current key, under another key the file holds, under a key it lacks.
    pub fn s3_secret_states(&self) -> Result<[u64; 4], OmError> {
        let keys = self.keyring.as_ref().map(|k| k.keys());
        let mut n = [0; 4];
        let mut it = self.credential_records()?;
        it.seek_to_first();
        while let Some((_, v)) = it.current() {
            let rec = table::decode::<S3SecretTable>(v)?;
            let i = match (&rec.sealed, &keys) {
                (None, _) => 0,
                (Some(s), Some(k)) if s.key_id == k.current() => 1,
                (Some(s), Some(k)) if k.has(&s.key_id) => 2,
                (Some(_), _) => 3,
            };
            n[i] += 1;
            it.advance();
        }
        it.status()?;
        Ok(n)
    }

    /// An iterator over every credential record (they sort before the
    /// index by user); positions nothing.
    fn credential_records(&self) -> Result<DeferredSeekIter<'_>, OmError> {
        DeferredSeekIter::new(
            &self.db,
            keys::S3_SECRETS_CF,
            None,
            Some(keys::S3_USER_INDEX_PREFIX.to_vec()),
        )
    }

    /// Whether this node seals S3 secrets.
    pub fn seals_secrets(&self) -> bool {
        self.keyring.is_some()
    }

    /// Up to `MAX_RESEAL_ITEMS` credentials from `from` on that need
    /// sealing anew, and the last key looked at.
    fn reseal_page(
        &self,
        from: &[u8],
        keys: &crate::secrets::Keys,
        only_plaintext: bool,
        out: &mut Resealed,
    ) -> Result<(Vec<Reseal>, Option<Vec<u8>>), OmError> {
        let mut items = Vec::new();
        let mut it = self.credential_records()?;
        it.seek(from);
        let mut last = None;
        while let Some((k, v)) = it.current() {
            if items.len() == creds::MAX_RESEAL_ITEMS {
                break;
            }
            let rec = table::decode::<S3SecretTable>(v)?;
            last = Some(k.to_vec());
            match &rec.sealed {
                Some(s) if s.key_id == keys.current() || only_plaintext => out.unchanged += 1,
                Some(s) if !keys.has(&s.key_id) => {
                    if out.unreadable.len() < MAX_UNREADABLE {
                        out.unreadable.push(rec.access_key.clone());
                    }
                }
                _ => {
                    let secret = self.secret_of(&rec)?;
                    items.push(Reseal {
                        access_key: rec.access_key.clone(),
                        expect: rec.sealed.clone(),
                        sealed: Some(keys.seal(&rec.access_key, &rec.user, &secret)?),
                    });
                }
            }
            it.advance();
        }
        it.status()?;
        Ok((items, last))
    }

    /// The caller's rights on the cluster (every one when authorization is
    /// off), with the caller.
    fn cluster_caller(&self) -> Result<(Option<Caller>, u32), OmError> {
        let caller = self.caller()?;
        let rights = match &caller {
            Some(c) => authz::cluster_rights(&authz::cluster_acl(&self.db)?, c),
            None => authz::ALL | authz::CLUSTER_EXTRAS,
        };
        Ok((caller, rights))
    }

    fn refuse(&self, c: &Caller, resource: String, message: String) -> OmError {
        let e = OmError::Denied {
            right: "IMPERSONATE".to_string(),
            resource: resource.clone(),
            message: format!("{} {message}", crate::validate::quote_prefix(&c.user)),
        };
        if let Some(ctx) = authz::request() {
            self.audit_refusal(&ctx, &resource, &e);
        }
        e
    }

    /// A credential with its secret key. Needs IMPERSONATE on the cluster
    /// (gateways; admins hold it) or to be the credential's user; and
    /// another user's credential whose user is an admin or holds
    /// IMPERSONATE only an admin may read (a gateway would act as them).
    pub async fn get_s3_secret(
        &self,
        c: Consistency,
        access_key: &str,
    ) -> Result<S3SecretRecord, OmError> {
        self.read_barrier(c).await?;
        let (caller, rights) = self.cluster_caller()?;
        let rec = creds::get(&self.db, access_key)?;
        if let Some(who) = &caller
            && rights & IMPERSONATE == 0
            && rec.as_ref().is_none_or(|r| r.user != who.user)
        {
            return Err(self.refuse(
                who,
                format!("/s3-secrets/{access_key}"),
                "may read only their own S3 credentials without IMPERSONATE".to_string(),
            ));
        }
        if let (Some(who), Some(r)) = (&caller, &rec)
            && r.user != who.user
            && rights & authz::ALL != authz::ALL
        {
            let cluster = authz::cluster_acl(&self.db)?;
            let target = Caller {
                user: r.user.clone(),
                groups: r.groups.clone(),
                admin: self.configured_admin(&r.user),
                by: String::new(),
            };
            if authz::is_delegate(&cluster, &target) {
                return Err(self.refuse(
                    who,
                    format!("/s3-secrets/{access_key}"),
                    format!(
                        "may not read the S3 credential of {}, a cluster admin or a holder \
                         of IMPERSONATE (only an admin may)",
                        crate::validate::quote_prefix(&r.user)
                    ),
                ));
            }
        }
        rec.ok_or_else(|| {
            OmError::not_found(
                "S3_SECRET_NOT_FOUND",
                "access_key",
                format!("no S3 credential {access_key:?}"),
            )
        })
    }

    /// A page of credentials after `start_after`, of `user` (the caller's
    /// own when empty and the caller is no admin; every user's for an admin).
    pub async fn list_s3_secrets(
        &self,
        c: Consistency,
        user: &str,
        start_after: &str,
        max: usize,
    ) -> Result<S3SecretsPage, OmError> {
        self.read_barrier(c).await?;
        let (caller, rights) = self.cluster_caller()?;
        let admin = rights & authz::ALL == authz::ALL;
        let user = match &caller {
            Some(who) if !admin && user.is_empty() => who.user.as_str(),
            Some(who) if !admin && user != who.user => {
                return Err(self.refuse(
                    who,
                    Resource::Cluster.to_string(),
                    format!(
                        "may not list the S3 credentials of {} (admins only)",
                        crate::validate::quote_prefix(user)
                    ),
                ));
            }
            _ => user,
        };
        let max = max.clamp(1, MAX_S3_SECRETS_PAGE);
        let budget = self.max_response_bytes;
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut push = |rec: S3SecretRecord| -> bool {
            let n = item_len(prost::Message::encoded_len(&rec));
            if out.len() == max || (!out.is_empty() && bytes + n > budget) {
                return false;
            }
            bytes += n;
            out.push(creds::without_secret(rec));
            true
        };
        let mut truncated = false;
        if user.is_empty() {
            // Every credential: the records sort before the user index.
            let mut it = self.credential_records()?;
            it.seek(&after(start_after));
            while let Some((_, v)) = it.current() {
                let rec = crate::store::table::decode::<crate::store::table::S3SecretTable>(v)?;
                if !push(rec) {
                    truncated = true;
                    break;
                }
                it.advance();
            }
            it.status()?;
        } else {
            let prefix = keys::s3_user_prefix(user);
            let mut it = DeferredSeekIter::with_prefix(&self.db, keys::S3_SECRETS_CF, &prefix)?;
            let mut from = prefix.clone();
            from.extend_from_slice(&after(start_after));
            it.seek(&from);
            while let Some((k, _)) = it.current() {
                let access_key = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                if let Some(rec) = creds::get(&self.db, &access_key)?
                    && !push(rec)
                {
                    truncated = true;
                    break;
                }
                it.advance();
            }
            it.status()?;
        }
        Ok(S3SecretsPage {
            credentials: out,
            truncated,
        })
    }
}

/// The first key after `start_after` (itself excluded).
fn after(start_after: &str) -> Vec<u8> {
    let mut k = start_after.as_bytes().to_vec();
    if !k.is_empty() {
        k.push(0);
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_keys_have_the_formats_apply_accepts() {
        let (a, s) = new_s3_keys();
        assert!(creds::valid_access_key(&a), "{a}");
        assert!(creds::valid_secret_key(&s));
        assert_ne!(new_s3_keys().0, a);
    }
}
