//! Who a request is. S3 signs every request with an access key whose secret
//! key om keeps (`GetS3Secret`, which needs the gateway's IMPERSONATE right);
//! s3s verifies the signature with the secret this module hands it. Every om
//! call of the request then goes through a client that impersonates the
//! key's user (and groups), so om's ACLs and audit log see that user, never
//! the gateway.
//!
//! Secrets are cached for `--secret-cache-seconds` (a revoked key keeps
//! working at most that long here), unknown keys for a shorter while (so an
//! unknown key costs at most one om read per `MISS_TTL`), and both maps are
//! bounded. Known and unknown keys are kept apart: requests with made-up
//! keys never evict a known key's secret. Secrets stay in `SecretKey`, whose `Debug` is
//! redacted; nothing here logs one.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::OmClient;
use om_client::v1::GetS3SecretRequest;
use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use crate::errors;

/// Most known access keys cached.
const MAX_CACHED_KEYS: usize = 10_000;
/// Most unknown access keys remembered as unknown.
const MAX_CACHED_MISSES: usize = 10_000;
/// Most impersonating clients kept (one per user and groups).
const MAX_CACHED_USERS: usize = 10_000;
/// How long an unknown access key is remembered as unknown, at most.
const MISS_TTL: Duration = Duration::from_secs(2);
/// Longest access key considered (om's are 20 characters).
const MAX_ACCESS_KEY_LEN: usize = 128;

/// The user an access key acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

/// A map that forgets its oldest entries beyond `cap`.
struct Bounded<K, V> {
    cap: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            cap: cap.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_some() {
            return;
        }
        self.order.push_back(k);
        while self.map.len() > self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// A cached answer for one access key: its secret and user, or unknown.
#[derive(Clone)]
struct Cached {
    at: Instant,
    found: Option<(SecretKey, Arc<Identity>)>,
}

/// A user and its groups: what an impersonating client acts for.
type Principal = (String, Vec<String>);

/// Credentials and per-user om clients.
pub struct Auth {
    om: Arc<OmClient>,
    ttl: Duration,
    keys: Mutex<Bounded<String, Cached>>,
    /// When each unknown access key was last found unknown.
    misses: Mutex<Bounded<String, Instant>>,
    clients: Mutex<Bounded<Principal, Arc<OmClient>>>,
}

impl Auth {
    /// `om` is the gateway's own client (it needs IMPERSONATE); `ttl` bounds
    /// how long a secret is trusted without asking om again.
    pub fn new(om: Arc<OmClient>, ttl: Duration) -> Arc<Auth> {
        Arc::new(Auth {
            om,
            ttl,
            keys: Mutex::new(Bounded::new(MAX_CACHED_KEYS)),
            misses: Mutex::new(Bounded::new(MAX_CACHED_MISSES)),
            clients: Mutex::new(Bounded::new(MAX_CACHED_USERS)),
        })
    }

    /// The secret and user of `access_key`; `None` when om knows no such key.
    async fn lookup(&self, access_key: &str) -> S3Result<Option<(SecretKey, Arc<Identity>)>> {
        if access_key.is_empty()
            || access_key.len() > MAX_ACCESS_KEY_LEN
            || !access_key.bytes().all(|b| b.is_ascii_graphic())
        {
            return Ok(None);
        }
        if let Some(c) = self.cached(access_key) {
            return Ok(c);
        }
        let req = GetS3SecretRequest {
            read: None,
            access_key: access_key.to_string(),
        };
        let found = match self.om.get_s3_secret(req).await {
            Ok(r) => r.credential.map(|c| {
                (
                    SecretKey::from(r.secret_key),
                    Arc::new(Identity {
                        user: c.user,
                        groups: c.groups,
                    }),
                )
            }),
            // No such key, or not one om could have made.
            Err(e) if matches!(e.reason(), "S3_SECRET_NOT_FOUND" | "INVALID_ACCESS_KEY") => None,
            Err(e) if errors::s3_code(e.code(), e.reason(), "") == S3ErrorCode::AccessDenied => {
                tracing::error!(
                    reason = e.reason(),
                    "om refuses to tell secret keys: the gateway's principal needs IMPERSONATE"
                );
                return Err(S3Error::with_message(
                    S3ErrorCode::InternalError,
                    "the gateway may not verify credentials",
                ));
            }
            Err(e) => return Err(errors::from_om(e)),
        };
        self.remember(access_key, found.clone());
        Ok(found)
    }

    /// Caches om's answer for `access_key`: a known key's secret with the
    /// known ones, an unknown key apart, so unknown keys never push a known
    /// one out.
    fn remember(&self, access_key: &str, found: Option<(SecretKey, Arc<Identity>)>) {
        if self.ttl.is_zero() {
            return;
        }
        let at = Instant::now();
        match found {
            Some(found) => {
                let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
                keys.insert(
                    access_key.to_string(),
                    Cached {
                        at,
                        found: Some(found),
                    },
                );
            }
            None => {
                let mut misses = self.misses.lock().unwrap_or_else(|p| p.into_inner());
                misses.insert(access_key.to_string(), at);
            }
        }
    }

    /// A fresh cached answer for `access_key`, if any.
    fn cached(&self, access_key: &str) -> Option<Option<(SecretKey, Arc<Identity>)>> {
        let key = access_key.to_string();
        {
            let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = keys.get(&key)
                && c.at.elapsed() < self.ttl
            {
                return Some(c.found.clone());
            }
        }
        let misses = self.misses.lock().unwrap_or_else(|p| p.into_inner());
        let at = misses.get(&key)?;
        (at.elapsed() < self.ttl.min(MISS_TTL)).then_some(None)
    }

    /// The om client acting for the request's user. Anonymous requests are
    /// refused: om has no anonymous user.
    pub async fn client(&self, creds: Option<&Credentials>) -> S3Result<Arc<OmClient>> {
        let Some(creds) = creds else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are not accepted"
            ));
        };
        let Some((_, who)) = self.lookup(&creds.access_key).await? else {
            return Err(s3_error!(InvalidAccessKeyId));
        };
        self.client_for(&who)
    }

    /// The (cached) client impersonating `who`.
    pub fn client_for(&self, who: &Identity) -> S3Result<Arc<OmClient>> {
        let k = (who.user.clone(), who.groups.clone());
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&k) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            self.om
                .impersonating(&who.user, &who.groups)
                .map_err(errors::from_om)?,
        );
        clients.insert(k, c.clone());
        Ok(c)
    }

    /// The identity behind `creds`, for responses that name an owner.
    pub async fn identity(&self, creds: Option<&Credentials>) -> S3Result<Arc<Identity>> {
        let Some(creds) = creds else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are not accepted"
            ));
        };
        match self.lookup(&creds.access_key).await? {
            Some((_, who)) => Ok(who),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }

    /// The secret of `access_key`, to verify a signature with.
    pub async fn secret(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.lookup(access_key).await? {
            Some((secret, _)) => Ok(secret),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }

    /// Cached access keys (known and unknown) and clients (for tests and
    /// metrics).
    pub fn cache_sizes(&self) -> (usize, usize) {
        let k = self.keys.lock().unwrap_or_else(|p| p.into_inner()).len()
            + self.misses.lock().unwrap_or_else(|p| p.into_inner()).len();
        let c = self.clients.lock().unwrap_or_else(|p| p.into_inner()).len();
        (k, c)
    }
}

/// The `S3Auth` s3s calls to verify signatures.
pub struct SecretLookup(pub Arc<Auth>);

#[async_trait::async_trait]
impl S3Auth for SecretLookup {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.secret(access_key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client of an endpoint nobody listens on: any call that reaches om
    /// fails.
    fn unreachable_om() -> Arc<OmClient> {
        let opts = om_client::ClientOptions {
            deadline: Duration::from_millis(50),
            ..Default::default()
        };
        Arc::new(OmClient::new(&["127.0.0.1:1".to_string()], opts).unwrap())
    }

    #[test]
    fn bounded_forgets_oldest() {
        let mut b = Bounded::new(2);
        b.insert("a", 1);
        b.insert("b", 2);
        b.insert("a", 3);
        assert_eq!(b.get(&"a"), Some(&3));
        b.insert("c", 4);
        assert_eq!(b.len(), 2);
        assert_eq!(b.get(&"a"), None);
        assert_eq!(b.get(&"b"), Some(&2));
        assert_eq!(b.get(&"c"), Some(&4));
    }

    #[tokio::test]
    async fn malformed_keys_never_reach_om() {
        // A lookup that reached om would fail with ServiceUnavailable
        // instead of answering "unknown".
        let auth = Auth::new(unreachable_om(), Duration::from_secs(10));
        for k in ["", "with space", &"A".repeat(200)] {
            assert!(auth.lookup(k).await.unwrap().is_none(), "{k:?}");
        }
        assert!(auth.lookup("OMABCDEFGHIJ01234567").await.is_err());
        assert_eq!(auth.cache_sizes(), (0, 0));
        let e = auth.client(None).await.err().unwrap();
        assert_eq!(e.code(), &S3ErrorCode::AccessDenied);
    }

    /// Any number of unknown keys leaves a known key's secret cached, and
    /// an unknown key is answered from memory within `MISS_TTL`.
    #[tokio::test]
    async fn unknown_keys_never_evict_a_known_one() {
        let auth = Auth::new(unreachable_om(), Duration::from_secs(60));
        let who = Arc::new(Identity {
            user: "alice".into(),
            groups: vec![],
        });
        auth.remember("OMKNOWN0000000000000", Some((SecretKey::from("s"), who)));
        for i in 0..MAX_CACHED_MISSES + 100 {
            auth.remember(&format!("OMMADEUP{i:012}"), None);
        }
        // Both answered here: om (nobody listens) is never asked.
        let known = auth.lookup("OMKNOWN0000000000000").await.unwrap();
        assert_eq!(known.unwrap().1.user, "alice");
        let made_up = format!("OMMADEUP{:012}", MAX_CACHED_MISSES + 99);
        assert!(auth.lookup(&made_up).await.unwrap().is_none());
        assert_eq!(auth.cache_sizes().0, 1 + MAX_CACHED_MISSES);
    }

    #[test]
    fn secrets_do_not_show_in_debug() {
        let k = SecretKey::from("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
        assert!(!format!("{k:?}").contains("wJalr"));
    }
}
