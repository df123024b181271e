//! Key files, and the backup key that authenticates backups and the log
//! archive (`--backup-key-file`).
//!
//! A key file holds one key per line, `ID HEX`: an id of 1 to 64
//! characters of `[A-Za-z0-9._-]` and 32 bytes in 64 hex digits; `#`
//! starts a comment. The first key signs (or seals); every key listed
//! verifies (or opens), so a new key goes first and an old one stays while
//! anything made under it is kept. om's secrets key file has the same form.
//!
//! A backup key makes HMAC-SHA256 tags: over a manifest's bytes
//! (`ID/manifest.mac`, written before the manifest) and over each archive
//! segment's header and records, chained (see `om_raft_store::archive`).

use std::io::Read;
use std::path::Path;

use ring::hmac;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;
/// Longest key id.
pub const MAX_KEY_ID_LEN: usize = 64;
/// Bytes of a tag.
pub const TAG_LEN: usize = 32;
/// Largest key file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Whether `id` may name a key.
pub fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The keys of a key file's text, in order: at least one, ids distinct.
pub fn parse_key_lines(text: &str) -> Result<Vec<(String, [u8; KEY_LEN])>, String> {
    let mut keys: Vec<(String, [u8; KEY_LEN])> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("line {}", n + 1);
        let mut words = line.split_whitespace();
        let (Some(id), Some(hex_key), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("{}: expected `ID HEX`", at()));
        };
        if !valid_key_id(id) {
            return Err(format!(
                "{}: a key id is 1 to {MAX_KEY_ID_LEN} characters of [A-Za-z0-9._-]",
                at()
            ));
        }
        if keys.iter().any(|(k, _)| k == id) {
            return Err(format!("{}: key id {id:?} appears twice", at()));
        }
        let key: [u8; KEY_LEN] = hex::decode(hex_key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                format!(
                    "{}: a key is {KEY_LEN} bytes in {} hex digits",
                    at(),
                    2 * KEY_LEN
                )
            })?;
        keys.push((id.to_string(), key));
    }
    if keys.is_empty() {
        return Err("no key (one `ID HEX` line per key)".to_string());
    }
    Ok(keys)
}

/// A key file's text (at most 64 KiB).
pub fn read_key_file(path: &Path) -> Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("{}: over {MAX_FILE_BYTES} bytes", path.display()));
    }
    Ok(text)
}

/// Why a tag was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Made under a key the file does not hold.
    UnknownKey(String),
    /// The bytes are not those the tag was made over.
    Mismatch,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::UnknownKey(id) => write!(
                f,
                "signed under key {id:?}, which the backup key file does not hold"
            ),
            Refused::Mismatch => f.write_str(
                "its tag does not match its bytes: altered, or signed under another key",
            ),
        }
    }
}

/// The HMAC-SHA256 keys of a backup key file, the signing key first.
pub struct MacKeys {
    keys: Vec<(String, hmac::Key)>,
}

impl std::fmt::Debug for MacKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("MacKeys").field("ids", &ids).finish()
    }
}

impl MacKeys {
    pub fn parse(text: &str) -> Result<MacKeys, String> {
        Ok(MacKeys {
            keys: parse_key_lines(text)?
                .into_iter()
                .map(|(id, k)| (id, hmac::Key::new(hmac::HMAC_SHA256, &k)))
                .collect(),
        })
    }

    pub fn load(path: &Path) -> Result<MacKeys, String> {
        MacKeys::parse(&read_key_file(path)?).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The id of the signing key.
    pub fn current(&self) -> &str {
        &self.keys[0].0
    }

    fn key(&self, id: &str) -> Result<&hmac::Key, Refused> {
        self.keys
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, k)| k)
            .ok_or_else(|| Refused::UnknownKey(id.to_string()))
    }

    /// The tag of `parts` (concatenated) under the key `id`.
    pub fn tag_with(&self, id: &str, parts: &[&[u8]]) -> Result<[u8; TAG_LEN], Refused> {
        let mut ctx = hmac::Context::with_key(self.key(id)?);
        for p in parts {
            ctx.update(p);
        }
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(ctx.sign().as_ref());
        Ok(out)
    }

    /// The tag of `parts` under the signing key.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        self.tag_with(self.current(), parts).unwrap_or([0; TAG_LEN])
    }

    /// Checks `tag` over `parts` under the key `id`, in constant time.
    pub fn check(&self, id: &str, parts: &[&[u8]], tag: &[u8]) -> Result<(), Refused> {
        let want = self.tag_with(id, parts)?;
        if tag.len() == TAG_LEN && equal_in_constant_time(&want, tag) {
            Ok(())
        } else {
            Err(Refused::Mismatch)
        }
    }
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const K2: &str = "k2 ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn key_files_are_parsed_strictly() {
        let k = parse_key_lines(&format!("# keys\n{K2}\n\n{K1} # older\n")).unwrap();
        assert_eq!(
            k.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
            ["k2", "k1"]
        );
        for bad in [
            "",
            "# none",
            "k1",
            "k1 00",
            &format!("{K1}\n{K1}"),
            &format!("a b {K1}"),
        ] {
            assert!(parse_key_lines(bad).is_err(), "{bad:?}");
        }
        assert!(parse_key_lines(&K1.replace("k1", "k 1")).is_err());
    }

    #[test]
    fn tags_check_under_the_key_that_made_them() {
        let old = MacKeys::parse(K1).unwrap();
        let both = MacKeys::parse(&format!("{K2}\n{K1}")).unwrap();
        let t = old.tag(&[b"ab", b"c"]);
        assert_eq!(both.check("k1", &[b"a", b"bc"], &t), Ok(()));
        assert_eq!(both.check("k1", &[b"abd"], &t), Err(Refused::Mismatch));
        assert_eq!(both.check("k2", &[b"abc"], &t), Err(Refused::Mismatch));
        assert_eq!(
            MacKeys::parse(K2).unwrap().check("k1", &[b"abc"], &t),
            Err(Refused::UnknownKey("k1".into()))
        );
        assert_eq!(
            both.check("k1", &[b"abc"], &t[..31]),
            Err(Refused::Mismatch)
        );
    }
}
