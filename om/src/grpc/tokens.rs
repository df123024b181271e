//! Bearer tokens: their format, the `--token-file` that lists them (reread
//! when it changes), and the per-source limit on failed attempts.
//!
//! A token is `omt_ID_SECRET`: `ID` is 16 hex digits that name the token
//! publicly, `SECRET` 32 to 128 characters of `[A-Za-z0-9_-]` (`omctl token
//! new` makes 64 hex digits: 256 random bits). The file holds one line per
//! token, `PRINCIPAL omt_ID SALT SHA256 [GROUPS]`, with the salt and
//! `SHA-256(salt || token)` in hex and optionally the principal's groups,
//! comma-separated; blank lines and `#` comments are skipped. The tokens
//! themselves are never stored.
//!
//! Checking a token costs one map lookup by its id and one SHA-256 of at
//! most `MAX_TOKEN_BYTES`, whatever the file's length: a microsecond, so it
//! runs inline on the async workers without holding them. A fast hash is
//! enough because the secrets are random (256 bits), not chosen passwords.
//! A source (IP address) whose attempts keep failing gets a refusal that
//! tells it to back off, not audited (`FailureLimiter`); valid credentials
//! from the same address keep working, so clients behind one NAT are not
//! locked out by another's mistakes. Guessing is hopeless anyway: a secret
//! has at least 190 bits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::authz::{MAX_GROUPS, valid_name};

/// Longest token file read.
pub const MAX_TOKEN_FILE_BYTES: u64 = 1 << 20;
/// Longest principal name.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Longest bearer token accepted in a request (`omt_`, the id, `_` and at
/// most `MAX_SECRET_CHARS`).
pub const MAX_TOKEN_BYTES: usize = 4 + ID_HEX + 1 + MAX_SECRET_CHARS;
/// What every token (and every id in the file) starts with.
pub const TOKEN_PREFIX: &str = "omt_";
/// Hex digits of a token's id.
pub const ID_HEX: usize = 16;
const MIN_SECRET_CHARS: usize = 32;
const MAX_SECRET_CHARS: usize = 128;

/// A token split into its public id and its whole text; `None` when it is
/// not `omt_ID_SECRET`.
pub fn token_id(token: &str) -> Option<u64> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_at_checked(ID_HEX)?;
    let secret = secret.strip_prefix('_')?;
    let secret_ok = (MIN_SECRET_CHARS..=MAX_SECRET_CHARS).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (secret_ok && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
}

fn sha256(salt: &[u8], token: &[u8]) -> Vec<u8> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(salt);
    ctx.update(token);
    ctx.finish().as_ref().to_vec()
}

/// Whether two digests are equal, looking at every byte whatever differs.
fn same_digest(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token-file line for `principal` holding `token` (which must be
/// `omt_ID_SECRET`), salted with `salt`.
pub fn token_line(principal: &str, token: &str, salt: &[u8]) -> String {
    let id = token_id(token).expect("a token of the form omt_ID_SECRET");
    format!(
        "{principal} {TOKEN_PREFIX}{id:016x} {} {}",
        hex::encode(salt),
        hex::encode(sha256(salt, token.as_bytes()))
    )
}

/// A new token with 256 random bits of secret.
pub fn new_token() -> String {
    let id: u64 = rand::random();
    let secret: [u8; 32] = rand::random();
    format!("{TOKEN_PREFIX}{id:016x}_{}", hex::encode(secret))
}

#[derive(Debug)]
pub(crate) struct TokenEntry {
    pub principal: String,
    pub groups: Vec<String>,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

/// The parsed `--token-file`, by token id.
#[derive(Debug, Default)]
pub struct TokenFile {
    entries: HashMap<u64, TokenEntry>,
}

impl TokenFile {
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut entries = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |what: String| format!("line {}: {what}", n + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let old = |f: &&str| !f.starts_with(TOKEN_PREFIX);
            if fields.len() >= 2 && old(&fields[1]) {
                return Err(at(format!(
                    "the second field must be the token's id, {TOKEN_PREFIX} and {ID_HEX} hex \
                     digits (a line without one is of an older format: make a new token \
                     with `omctl token new PRINCIPAL`)"
                )));
            }
            let (principal, id, salt, hash, groups) = match fields[..] {
                [p, i, s, h] => (p, i, s, h, ""),
                [p, i, s, h, g] => (p, i, s, h, g),
                _ => {
                    return Err(at(format!(
                        "expected PRINCIPAL omt_ID SALT SHA256 [GROUP,...], got {} fields",
                        fields.len()
                    )));
                }
            };
            let id = id
                .strip_prefix(TOKEN_PREFIX)
                .filter(|i| i.len() == ID_HEX && i.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|i| u64::from_str_radix(i, 16).ok())
                .ok_or_else(|| {
                    at(format!(
                        "the second field must be the token's id, {TOKEN_PREFIX} and {ID_HEX} hex \
                         digits (a line without one is of an older format: make a new token \
                         with `omctl token new PRINCIPAL`)"
                    ))
                })?;
            let groups: Vec<String> = groups
                .split(',')
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect();
            if groups.len() > MAX_GROUPS || !groups.iter().all(|g| valid_name(g)) {
                return Err(at(format!(
                    "at most {MAX_GROUPS} groups, each 1 to 256 bytes without ':'"
                )));
            }
            if principal.len() > MAX_PRINCIPAL_BYTES || !valid_name(principal) {
                return Err(at(format!(
                    "the principal must be 1 to {MAX_PRINCIPAL_BYTES} bytes without ',' or ':'"
                )));
            }
            let salt = hex::decode(salt).map_err(|e| at(format!("salt: {e}")))?;
            let hash = hex::decode(hash).map_err(|e| at(format!("hash: {e}")))?;
            if salt.len() < 8 || hash.len() != 32 {
                return Err(at(
                    "the salt must be at least 8 bytes and the hash a SHA-256 (32 bytes)".into(),
                ));
            }
            let entry = TokenEntry {
                principal: principal.to_string(),
                groups,
                salt,
                hash,
            };
            if entries.insert(id, entry).is_some() {
                return Err(at(format!(
                    "token id {TOKEN_PREFIX}{id:016x} is listed twice"
                )));
            }
        }
        Ok(TokenFile { entries })
    }

    fn read(path: &Path) -> Result<String, String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TOKEN_FILE_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
            return Err(format!(
                "{}: larger than {MAX_TOKEN_FILE_BYTES} bytes",
                path.display()
            ));
        }
        Ok(text)
    }

    pub fn load(path: &Path) -> Result<TokenFile, String> {
        Self::parse(&Self::read(path)?).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The principal `token` belongs to.
    pub fn principal_of(&self, token: &str) -> Option<&str> {
        self.entry_of(token).map(|e| e.principal.as_str())
    }

    /// The line `token` matches: the one its id selects, if the salted hash
    /// agrees. One hash whatever the file's length.
    pub(crate) fn entry_of(&self, token: &str) -> Option<&TokenEntry> {
        if token.len() > MAX_TOKEN_BYTES {
            return None;
        }
        let e = self.entries.get(&token_id(token)?)?;
        same_digest(&sha256(&e.salt, token.as_bytes()), &e.hash).then_some(e)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The `--token-file`, reread when its content changes (like certificate
/// files, see `om_tls::spawn_reload`): a file that no longer parses, or is
/// empty, is logged and the previous tokens stay in force. Replace it
/// atomically (write a new file, rename it over the old one).
pub struct TokenStore {
    path: PathBuf,
    state: RwLock<(String, Arc<TokenFile>)>,
}

impl TokenStore {
    pub fn load(path: &Path) -> Result<Arc<TokenStore>, String> {
        let text = TokenFile::read(path)?;
        let file = TokenFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Arc::new(TokenStore {
            path: path.to_path_buf(),
            state: RwLock::new((text, Arc::new(file))),
        }))
    }

    /// The tokens in force.
    pub fn current(&self) -> Arc<TokenFile> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}

impl om_tls::Reloader for TokenStore {
    fn reload(&self) -> Result<bool, om_tls::TlsError> {
        let text = TokenFile::read(&self.path).map_err(om_tls::TlsError::Config)?;
        if self.state.read().unwrap_or_else(|e| e.into_inner()).0 == text {
            return Ok(false);
        }
        // An empty file is most likely one being rewritten in place; a file
        // that means "no tokens" says so with a comment line.
        if text.is_empty() && !self.current().is_empty() {
            return Err(om_tls::TlsError::Config(format!(
                "{}: empty (to revoke every token, leave a comment line)",
                self.path.display()
            )));
        }
        let file = TokenFile::parse(&text)
            .map_err(|e| om_tls::TlsError::Config(format!("{}: {e}", self.path.display())))?;
        tracing::info!(tokens = file.len(), "token file reread");
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = (text, Arc::new(file));
        Ok(true)
    }

    fn name(&self) -> &str {
        "token-file"
    }
}

/// Failed authentications a source may have in a burst.
pub const FAILURE_BURST: f64 = 20.0;
/// Failed authentications per second a source may sustain.
pub const FAILURES_PER_SEC: f64 = 5.0;
/// Sources remembered at once; past it, those whose allowance is whole
/// again are forgotten (at most once a second), else the least recently
/// failed one.
const MAX_SOURCES: usize = 16_384;

/// Counts failed authentications per source IP address (a token bucket of
/// `FAILURE_BURST` refilled at `FAILURES_PER_SEC`); the failures of a source
/// whose bucket is empty are answered TOO_MANY_AUTH_FAILURES and not
/// audited. Addresses behind one NAT share a bucket.
pub struct FailureLimiter {
    burst: f64,
    per_sec: f64,
    state: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    /// Allowance left and when it was counted, by source.
    sources: HashMap<Option<IpAddr>, (f64, Instant)>,
    last_sweep: Option<Instant>,
}

impl Default for FailureLimiter {
    fn default() -> Self {
        Self::new(FAILURE_BURST, FAILURES_PER_SEC)
    }
}

impl FailureLimiter {
    pub fn new(burst: f64, per_sec: f64) -> Self {
        FailureLimiter {
            burst,
            per_sec,
            state: Mutex::default(),
        }
    }

    fn allowance(&self, left: f64, since: Instant, now: Instant) -> f64 {
        (left + now.saturating_duration_since(since).as_secs_f64() * self.per_sec).min(self.burst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `source` may try to authenticate now.
    pub fn admits(&self, source: Option<IpAddr>) -> bool {
        let now = Instant::now();
        match self.lock().sources.get(&source) {
            Some((left, since)) => self.allowance(*left, *since, now) >= 1.0,
            None => true,
        }
    }

    /// Records a failed attempt of `source`.
    pub fn failed(&self, source: Option<IpAddr>) {
        let now = Instant::now();
        let mut st = self.lock();
        if !st.sources.contains_key(&source) && st.sources.len() >= MAX_SOURCES {
            if st
                .last_sweep
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
            {
                st.last_sweep = Some(now);
                let (burst, per_sec) = (self.burst, self.per_sec);
                st.sources.retain(|_, (left, since)| {
                    *left + now.saturating_duration_since(*since).as_secs_f64() * per_sec < burst
                });
            }
            if st.sources.len() >= MAX_SOURCES
                && let Some(oldest) = st
                    .sources
                    .iter()
                    .min_by_key(|(_, (_, since))| *since)
                    .map(|(k, _)| *k)
            {
                st.sources.remove(&oldest);
            }
        }
        let (left, since) = st
            .sources
            .get(&source)
            .copied()
            .unwrap_or((self.burst, now));
        let left = self.allowance(left, since, now) - 1.0;
        st.sources.insert(source, (left.max(0.0), now));
    }

    /// Sources remembered (for tests and metrics).
    pub fn tracked(&self) -> usize {
        self.lock().sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "omt_00000000000000a1_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const G: &str = "omt_00000000000000b2_gggggggggggggggggggggggggggggggggggggggg";

    #[test]
    fn tokens_match_their_line_only() {
        let text = format!(
            "# operators\n{}\n\n{}\n",
            token_line("alice", A, b"saltsalt"),
            token_line("gateway", G, b"another salt")
        );
        let f = TokenFile::parse(&text).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.principal_of(A), Some("alice"));
        assert_eq!(f.principal_of(G), Some("gateway"));
        // Right id, wrong secret; wrong id, right secret; no id.
        let wrong_secret = A.replace("aaaa", "aaab");
        assert_eq!(f.principal_of(&wrong_secret), None);
        assert_eq!(f.principal_of(&A.replace("a1_", "a2_")), None);
        assert_eq!(f.principal_of(&A[..A.len() - 1]), None);
        assert_eq!(f.principal_of(""), None);
        assert_eq!(f.principal_of("s3cret"), None);
        assert!(!text.contains("aaaaaaaa"), "the file holds no secret");
    }

    #[test]
    fn new_tokens_are_well_formed_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        for t in [&a, &b] {
            assert!(token_id(t).is_some(), "{t}");
            assert!(t.len() <= MAX_TOKEN_BYTES);
            let f = TokenFile::parse(&token_line("p", t, b"12345678")).unwrap();
            assert_eq!(f.principal_of(t), Some("p"));
        }
        for bad in [
            "omt_00000000000000a1",
            "omt_00000000000000a1_short",
            "omt_0000000000000za1_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "omt_00000000000000a1_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa aaaa",
            "xyz_00000000000000a1_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            assert_eq!(token_id(bad), None, "{bad}");
        }
        let long = format!("omt_00000000000000a1_{}", "a".repeat(MAX_SECRET_CHARS + 1));
        assert_eq!(token_id(&long), None);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let dup = format!(
            "{}\n{}",
            token_line("a", A, b"12345678"),
            token_line("b", A, b"87654321")
        );
        for (text, want) in [
            ("alice abc", "line 1"),
            ("\nalice omt_00000000000000a1 zz 00", "line 2"),
            ("alice omt_00000000000000a1 0011 00", "salt"),
            ("alice 0011223344556677 aabbccdd", "older format"),
            (dup.as_str(), "listed twice"),
        ] {
            let e = TokenFile::parse(text).err().unwrap();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    /// A file of 9,000 lines costs one hash per check: the id selects the
    /// line (counted here as the entries a check could compare: one).
    #[test]
    fn a_long_file_costs_one_hash_per_check() {
        let mut text = String::new();
        let mut tokens = Vec::new();
        for i in 0..9000u64 {
            let t = format!("omt_{i:016x}_{}", "s".repeat(40));
            text.push_str(&token_line(&format!("user{i}"), &t, b"saltsalt"));
            text.push('\n');
            tokens.push(t);
        }
        let f = TokenFile::parse(&text).unwrap();
        assert_eq!(f.principal_of(&tokens[8999]), Some("user8999"));
        let forged = format!("omt_{:016x}_{}", 9999, "s".repeat(40));
        assert_eq!(f.entry_of(&forged).map(|e| &e.principal), None);
    }

    #[test]
    fn the_token_file_is_reread_when_it_changes() {
        use om_tls::Reloader;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, token_line("alice", A, b"saltsalt")).unwrap();
        let s = TokenStore::load(&p).unwrap();
        assert_eq!(s.current().principal_of(A), Some("alice"));
        assert!(!s.reload().unwrap(), "unchanged");
        std::fs::write(&p, token_line("gateway", G, b"saltsalt")).unwrap();
        assert!(s.reload().unwrap());
        assert_eq!(
            s.current().principal_of(A),
            None,
            "alice's token is revoked"
        );
        assert_eq!(s.current().principal_of(G), Some("gateway"));
        std::fs::write(&p, "garbage").unwrap();
        assert!(s.reload().is_err());
        assert_eq!(s.current().principal_of(G), Some("gateway"), "kept");
    }

    #[test]
    fn failures_are_limited_per_source() {
        let l = FailureLimiter::new(3.0, 0.001);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(l.admits(Some(a)));
            l.failed(Some(a));
        }
        assert!(!l.admits(Some(a)), "a's burst is spent");
        assert!(l.admits(Some(b)), "b is another source");
        let fast = FailureLimiter::new(1.0, 1000.0);
        fast.failed(Some(a));
        std::thread::sleep(Duration::from_millis(5));
        assert!(fast.admits(Some(a)), "refilled");
    }
}
