//! S3 secrets sealed at rest: AES-256-GCM under the keys of
//! `--secrets-key-file`.
//!
//! The file holds one key per line, `ID HEX` (an id of 1 to 64 characters
//! of `[A-Za-z0-9._-]` and 32 bytes in 64 hex digits); `#` starts a
//! comment. The first key seals; every key listed opens what it sealed, so
//! a new key goes first and an old one stays until `omctl s3 secret
//! rotate-key` has sealed everything anew. The file is reread when it
//! changes, and every member is given the same file.
//!
//! A sealed secret names its key and carries a nonce the sealing node drew;
//! the access key and the user are its associated data, so a sealed secret
//! moved to another credential does not open.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use om_proto::store::{S3SecretRecord, SealedSecret};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::OmError;

pub use om_backup_format::keys::{MAX_KEY_ID_LEN, valid_key_id};
/// Bytes of AES-GCM's tag.
const TAG_LEN: usize = 16;

/// Whether `s` has the shape of a sealed secret of `plain_len` bytes.
pub fn well_formed(s: &SealedSecret, plain_len: usize) -> bool {
    valid_key_id(&s.key_id)
        && s.nonce.len() == NONCE_LEN
        && s.ciphertext.len() == plain_len + TAG_LEN
}

/// The keys of one reading of the file, the sealing key first.
pub struct Keys {
    keys: Vec<(String, LessSafeKey)>,
}

impl Keys {
    /// Parses a key file's text (`om_backup_format::keys`).
    pub fn parse(text: &str) -> Result<Keys, String> {
        let keys = om_backup_format::keys::parse_key_lines(text)?
            .into_iter()
            .map(|(id, k)| {
                let key = UnboundKey::new(&AES_256_GCM, &k).map_err(|_| "bad key".to_string())?;
                Ok((id, LessSafeKey::new(key)))
            })
            .collect::<Result<_, String>>()?;
        Ok(Keys { keys })
    }

    /// The id of the key that seals.
    pub fn current(&self) -> &str {
        &self.keys[0].0
    }

    fn key(&self, id: &str) -> Option<&LessSafeKey> {
        self.keys.iter().find(|(k, _)| k == id).map(|(_, k)| k)
    }

    /// Whether the file holds the key `id`.
    pub fn has(&self, id: &str) -> bool {
        self.key(id).is_some()
    }

    /// `secret` sealed under the current key, for the credential
    /// `access_key` of `user`.
    pub fn seal(
        &self,
        access_key: &str,
        user: &str,
        secret: &str,
    ) -> Result<SealedSecret, OmError> {
        let (id, key) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| OmError::Internal("no randomness for a nonce".to_string()))?;
        let mut data = secret.as_bytes().to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(access_key, user)),
            &mut data,
        )
        .map_err(|_| OmError::Internal("sealing a secret failed".to_string()))?;
        Ok(SealedSecret {
            key_id: id.clone(),
            nonce: nonce.to_vec(),
            ciphertext: data,
        })
    }

    /// The secret `s` seals for the credential `access_key` of `user`.
    pub fn open(&self, access_key: &str, user: &str, s: &SealedSecret) -> Result<String, OmError> {
        let key = self
            .key(&s.key_id)
            .ok_or_else(|| unknown_key(access_key, &s.key_id))?;
        let nonce = Nonce::try_assume_unique_for_key(&s.nonce).map_err(|_| corrupt(access_key))?;
        let mut data = s.ciphertext.clone();
        let plain = key
            .open_in_place(nonce, Aad::from(aad(access_key, user)), &mut data)
            .map_err(|_| corrupt(access_key))?;
        String::from_utf8(plain.to_vec()).map_err(|_| corrupt(access_key))
    }
}

/// What binds a sealed secret to its credential.
fn aad(access_key: &str, user: &str) -> Vec<u8> {
    let mut a = b"om-s3-secret\0".to_vec();
    a.extend_from_slice(access_key.as_bytes());
    a.push(0);
    a.extend_from_slice(user.as_bytes());
    a
}

fn unknown_key(access_key: &str, id: &str) -> OmError {
    OmError::precondition(
        "SECRETS_KEY_UNKNOWN",
        "access_key",
        format!(
            "the secret of {access_key:?} is sealed under key {id:?}, which --secrets-key-file \
             does not hold (give that key back, listed after the current one)"
        ),
    )
}

fn corrupt(access_key: &str) -> OmError {
    OmError::Internal(format!(
        "the sealed secret of {access_key:?} does not open: altered, or sealed under another \
         key of the same id"
    ))
}

/// The key file and what it held when last read.
pub struct Keyring {
    path: PathBuf,
    state: RwLock<(String, Arc<Keys>)>,
}

impl Keyring {
    pub fn load(path: &Path) -> Result<Arc<Keyring>, String> {
        let text = read(path)?;
        let keys = Keys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        warn_if_readable_by_others(path);
        Ok(Arc::new(Keyring {
            path: path.to_path_buf(),
            state: RwLock::new((text, Arc::new(keys))),
        }))
    }

    /// The keys in force.
    pub fn keys(&self) -> Arc<Keys> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// The secret of `r`: opened, or as stored in plain text.
    pub fn secret_of(keyring: Option<&Keyring>, r: &S3SecretRecord) -> Result<String, OmError> {
        match (&r.sealed, keyring) {
            (None, _) => Ok(r.secret_key.clone()),
            (Some(s), Some(k)) => k.keys().open(&r.access_key, &r.user, s),
            (Some(s), None) => Err(OmError::precondition(
                "SECRETS_KEY_REQUIRED",
                "access_key",
                format!(
                    "the secret of {:?} is sealed under key {:?}; this node has no \
                     --secrets-key-file",
                    r.access_key, s.key_id
                ),
            )),
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    om_backup_format::keys::read_key_file(path)
}

fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o007 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", m.permissions().mode() & 0o777),
            "the secrets key file is open to every user (0600, 0400 or 0440 keeps it private)"
        );
    }
}

impl om_tls::Reloader for Keyring {
    fn reload(&self) -> Result<bool, om_tls::TlsError> {
        let text = read(&self.path).map_err(om_tls::TlsError::Config)?;
        if self.state.read().unwrap_or_else(|e| e.into_inner()).0 == text {
            return Ok(false);
        }
        let keys = Keys::parse(&text)
            .map_err(|e| om_tls::TlsError::Config(format!("{}: {e}", self.path.display())))?;
        tracing::info!(
            current = keys.current(),
            keys = keys.keys.len(),
            "secrets key file reread"
        );
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = (text, Arc::new(keys));
        Ok(true)
    }

    fn name(&self) -> &str {
        "secrets-key-file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const K2: &str = "k2 ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn the_first_key_seals() {
        let k = Keys::parse(&format!("# keys\n{K2}\n\n{K1} # older\n")).unwrap();
        assert_eq!(k.current(), "k2");
        assert!(k.has("k1") && !k.has("k3"));
        assert!(Keys::parse("k1 00").is_err());
    }

    /// A secret opens under the key that sealed it, for its own credential
    /// only; altered bytes and a missing key are errors.
    #[test]
    fn sealed_secrets_open_only_where_they_belong() {
        let secret = "s".repeat(40);
        let old = Keys::parse(K1).unwrap();
        let s = old.seal("OMA", "alice", &secret).unwrap();
        assert!(well_formed(&s, 40));
        assert!(!s.ciphertext.windows(40).any(|w| w == secret.as_bytes()));
        assert_ne!(old.seal("OMA", "alice", &secret).unwrap().nonce, s.nonce);
        let both = Keys::parse(&format!("{K2}\n{K1}")).unwrap();
        assert_eq!(both.open("OMA", "alice", &s).unwrap(), secret);
        assert!(both.open("OMB", "alice", &s).is_err());
        assert!(both.open("OMA", "bob", &s).is_err());
        let mut altered = s.clone();
        altered.ciphertext[3] ^= 1;
        assert!(both.open("OMA", "alice", &altered).is_err());
        let e = Keys::parse(K2)
            .unwrap()
            .open("OMA", "alice", &s)
            .unwrap_err();
        assert!(e.to_string().contains("k1"), "{e}");
    }
}
