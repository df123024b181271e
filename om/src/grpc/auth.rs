//! Who is calling the public gRPC port: a principal from the client's
//! certificate (verified against `--tls-ca` during the TLS handshake) or from
//! a bearer token checked against `--token-file`.
//!
//! The token file holds one line per token, `PRINCIPAL SALT SHA256 [GROUPS]`
//! with the salt and `SHA-256(salt || token)` in hex (`omctl token hash
//! PRINCIPAL` prints one) and optionally the principal's groups,
//! comma-separated; blank lines and `#` comments are skipped. The tokens
//! themselves are never stored. A certificate's groups are its subject's
//! Organization (O) attributes, as Kubernetes reads them.
//!
//! `Authenticate` wraps the public services: when credentials are required
//! (a CA or a token file is configured) a request without a valid certificate
//! or token is answered `UNAUTHENTICATED` before its message is decoded (and
//! audited); a served request runs inside an `authz::RequestCtx` naming its
//! principal, the user it impersonates (`om-impersonate-user`,
//! `om-impersonate-groups`), its operation and request id (`x-request-id`
//! when usable, else generated), which the response returns in
//! `om-request-id`.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

pub use crate::authz::Principal;
use crate::authz::{Impersonation, MAX_GROUPS, RequestCtx, valid_name};

/// Longest token file read.
pub const MAX_TOKEN_FILE_BYTES: u64 = 1 << 20;
/// Longest principal name.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Longest bearer token accepted in a request.
pub const MAX_TOKEN_BYTES: usize = 4096;

struct TokenEntry {
    principal: String,
    groups: Vec<String>,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

/// The parsed `--token-file`.
pub struct TokenFile {
    entries: Vec<TokenEntry>,
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

/// The token-file line for `principal` holding `token`, salted with `salt`.
pub fn token_line(principal: &str, token: &str, salt: &[u8]) -> String {
    format!(
        "{principal} {} {}",
        hex::encode(salt),
        hex::encode(sha256(salt, token.as_bytes()))
    )
}

impl TokenFile {
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (principal, salt, hash, groups) = match fields[..] {
                [p, s, h] => (p, s, h, ""),
                [p, s, h, g] => (p, s, h, g),
                _ => {
                    return Err(format!(
                        "line {}: expected PRINCIPAL SALT SHA256 [GROUP,...], got {} fields",
                        n + 1,
                        fields.len()
                    ));
                }
            };
            let groups: Vec<String> = groups
                .split(',')
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect();
            if groups.len() > MAX_GROUPS || !groups.iter().all(|g| valid_name(g)) {
                return Err(format!(
                    "line {}: at most {MAX_GROUPS} groups, each 1 to 256 bytes without ':'",
                    n + 1
                ));
            }
            if principal.len() > MAX_PRINCIPAL_BYTES {
                return Err(format!(
                    "line {}: principal longer than {MAX_PRINCIPAL_BYTES} bytes",
                    n + 1
                ));
            }
            let salt = hex::decode(salt).map_err(|e| format!("line {}: salt: {e}", n + 1))?;
            let hash = hex::decode(hash).map_err(|e| format!("line {}: hash: {e}", n + 1))?;
            if salt.len() < 8 || hash.len() != 32 {
                return Err(format!(
                    "line {}: the salt must be at least 8 bytes and the hash a SHA-256 (32 bytes)",
                    n + 1
                ));
            }
            entries.push(TokenEntry {
                principal: principal.to_string(),
                groups,
                salt,
                hash,
            });
        }
        Ok(TokenFile { entries })
    }

    pub fn load(path: &Path) -> Result<TokenFile, String> {
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
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The principal `token` belongs to.
    pub fn principal_of(&self, token: &str) -> Option<&str> {
        self.entry_of(token).map(|e| e.principal.as_str())
    }

    fn entry_of(&self, token: &str) -> Option<&TokenEntry> {
        self.entries
            .iter()
            .find(|e| same_digest(&sha256(&e.salt, token.as_bytes()), &e.hash))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A client certificate's name (its first DNS subject alternative name,
/// else its subject's common name) and groups: the subject's Organization
/// attributes that are valid group names, at most `MAX_GROUPS`.
pub fn certificate_identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    use x509_parser::prelude::*;
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let groups: Vec<String> = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .filter(|o| valid_name(o))
        .take(MAX_GROUPS)
        .map(str::to_string)
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                return Some((d.to_string(), groups));
            }
        }
    }
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(|cn| (cn.to_string(), groups))
}

/// What the public port requires of a caller.
pub struct Authenticator {
    /// Credentials are required (a CA or a token file is configured).
    pub required: bool,
    pub tokens: Option<TokenFile>,
    /// Where refusals are audited.
    pub audit: Option<Arc<crate::audit::AuditLog>>,
}

/// Metadata naming the end user a gateway acts for.
pub const IMPERSONATE_USER: &str = "om-impersonate-user";
/// Metadata naming that user's groups, comma-separated.
pub const IMPERSONATE_GROUPS: &str = "om-impersonate-groups";
/// Longest client-supplied request id kept.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The user a request asks to act for, if any.
pub fn impersonation(headers: &http::HeaderMap) -> Result<Option<Impersonation>, Status> {
    let bad = |field: &str, msg: &str| {
        super::refusal(
            tonic::Code::InvalidArgument,
            "INVALID_IMPERSONATION",
            field,
            msg,
        )
    };
    let Some(user) = headers.get(IMPERSONATE_USER) else {
        if headers.contains_key(IMPERSONATE_GROUPS) {
            return Err(bad(
                IMPERSONATE_GROUPS,
                "om-impersonate-groups without om-impersonate-user",
            ));
        }
        return Ok(None);
    };
    let user = user
        .to_str()
        .ok()
        .filter(|u| valid_name(u))
        .ok_or_else(|| {
            bad(
                IMPERSONATE_USER,
                "the impersonated user must be 1 to 256 bytes without whitespace, ',' or ':'",
            )
        })?;
    let mut groups = Vec::new();
    if let Some(g) = headers.get(IMPERSONATE_GROUPS) {
        let g = g
            .to_str()
            .map_err(|_| bad(IMPERSONATE_GROUPS, "not ASCII"))?;
        for name in g.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !valid_name(name) || groups.len() == MAX_GROUPS {
                return Err(bad(
                    IMPERSONATE_GROUPS,
                    "at most 32 groups, each 1 to 256 bytes without whitespace or ':'",
                ));
            }
            groups.push(name.to_string());
        }
    }
    Ok(Some(Impersonation {
        user: user.to_string(),
        groups,
    }))
}

/// The request's id: the client's `x-request-id` when it is 1 to 128
/// visible ASCII characters, else a new one unique in this process.
pub fn request_id(headers: &http::HeaderMap) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BOOT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    if let Some(v) = headers.get("x-request-id").and_then(|v| v.to_str().ok())
        && !v.is_empty()
        && v.len() <= MAX_REQUEST_ID_BYTES
        && v.bytes().all(|b| b.is_ascii_graphic())
    {
        return v.to_string();
    }
    let boot = BOOT.get_or_init(crate::service::now_ms);
    format!("{boot:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Authenticator {
    /// The principal a request with these `headers`, on a connection
    /// described by `info`, is served for.
    pub fn authenticate(
        &self,
        headers: &http::HeaderMap,
        info: Option<&crate::net::ConnInfo>,
    ) -> Result<Principal, Status> {
        if let Some(cert) = info
            .and_then(|i| i.peer_certs.as_ref())
            .and_then(|c| c.first())
        {
            return match certificate_identity(cert) {
                Some((name, _)) if name.len() > MAX_PRINCIPAL_BYTES => Err(super::refusal(
                    tonic::Code::Unauthenticated,
                    "CERTIFICATE_WITHOUT_NAME",
                    "",
                    "the client certificate's name is longer than 256 bytes",
                )),
                Some((name, groups)) => Ok(Principal {
                    name,
                    groups,
                    via: "certificate",
                }),
                None => Err(super::refusal(
                    tonic::Code::Unauthenticated,
                    "CERTIFICATE_WITHOUT_NAME",
                    "",
                    "the client certificate names no DNS subject alternative name or common name",
                )),
            };
        }
        if let Some(v) = headers.get(http::header::AUTHORIZATION) {
            let Some(tokens) = &self.tokens else {
                return Err(super::refusal(
                    tonic::Code::Unauthenticated,
                    "TOKENS_NOT_ACCEPTED",
                    "authorization",
                    "bearer tokens are not accepted here (the server has no --token-file)",
                ));
            };
            let token = v
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
                .ok_or_else(|| {
                    super::refusal(
                        tonic::Code::Unauthenticated,
                        "BAD_AUTHORIZATION",
                        "authorization",
                        "the authorization header is not `Bearer TOKEN`",
                    )
                })?;
            return match tokens.entry_of(token) {
                Some(e) => Ok(Principal {
                    name: e.principal.clone(),
                    groups: e.groups.clone(),
                    via: "token",
                }),
                None => Err(super::refusal(
                    tonic::Code::Unauthenticated,
                    "INVALID_TOKEN",
                    "authorization",
                    "invalid token",
                )),
            };
        }
        if self.required {
            return Err(super::refusal(
                tonic::Code::Unauthenticated,
                "CREDENTIALS_REQUIRED",
                "",
                "credentials required: a client certificate or a bearer token",
            ));
        }
        Ok(Principal {
            name: "anonymous".to_string(),
            groups: Vec::new(),
            via: "none",
        })
    }

    fn audit_refusal(
        &self,
        operation: &str,
        request_id: String,
        principal: Option<&Principal>,
        status: &Status,
    ) {
        let Some(log) = &self.audit else { return };
        let reason = status
            .metadata()
            .get("om-reason")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("UNAUTHENTICATED");
        log.record(crate::audit::Event {
            time_ms: crate::service::now_ms(),
            request_id,
            principal: principal.map(|p| p.name.clone()).unwrap_or_default(),
            via: principal.map_or("none", |p| p.via),
            operation: operation.to_string(),
            result: reason.to_string(),
            refusal: true,
            ..crate::audit::Event::default()
        });
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Wraps a public service: authenticates every request before it is decoded.
#[derive(Clone)]
pub struct Authenticate<S> {
    inner: S,
    auth: Arc<Authenticator>,
}

impl<S> Authenticate<S> {
    pub fn new(inner: S, auth: Arc<Authenticator>) -> Self {
        Authenticate { inner, auth }
    }
}

impl<S: NamedService> NamedService for Authenticate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Authenticate<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let info = req.extensions().get::<crate::net::ConnInfo>();
        let operation = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let request_id = request_id(req.headers());
        let refused = |status: Status| -> Self::Future {
            let mut resp = status.into_http();
            if let Ok(v) = request_id.parse() {
                resp.headers_mut().insert("om-request-id", v);
            }
            Box::pin(async move { Ok(resp) })
        };
        let principal = match self.auth.authenticate(req.headers(), info) {
            Ok(p) => p,
            Err(status) => {
                metrics::counter!("om_unauthenticated_total").increment(1);
                self.auth
                    .audit_refusal(&operation, request_id.clone(), None, &status);
                return refused(status);
            }
        };
        let impersonate = match impersonation(req.headers()) {
            Ok(i) => i,
            Err(status) => {
                self.auth
                    .audit_refusal(&operation, request_id.clone(), Some(&principal), &status);
                return refused(status);
            }
        };
        let header = request_id.parse().ok();
        let staleness = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        let ctx = RequestCtx {
            principal,
            impersonate,
            operation,
            request_id,
            staleness_ms: staleness.clone(),
        };
        let fut = crate::authz::scope(ctx, self.inner.call(req));
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some(v) = header {
                resp.headers_mut().insert("om-request-id", v);
            }
            let age = staleness.load(std::sync::atomic::Ordering::Relaxed);
            if age != u64::MAX {
                resp.headers_mut()
                    .insert("om-read-staleness-ms", http::HeaderValue::from(age));
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_their_line_only() {
        let text = format!(
            "# operators\n{}\n\n{}\n",
            token_line("alice", "s3cret-a", b"saltsalt"),
            token_line("gateway", "s3cret-g", b"another salt")
        );
        let f = TokenFile::parse(&text).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.principal_of("s3cret-a"), Some("alice"));
        assert_eq!(f.principal_of("s3cret-g"), Some("gateway"));
        assert_eq!(f.principal_of("s3cret-"), None);
        assert_eq!(f.principal_of(""), None);
        assert!(!text.contains("s3cret"), "the file holds no token");
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, want) in [
            ("alice abc", "line 1"),
            ("\nalice zz 00", "line 2"),
            ("alice 0011 00", "salt"),
        ] {
            let e = TokenFile::parse(text).err().unwrap();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn impersonation_headers_are_checked() {
        let mut h = http::HeaderMap::new();
        assert_eq!(impersonation(&h).unwrap(), None);
        h.insert(IMPERSONATE_GROUPS, "eng".parse().unwrap());
        assert!(impersonation(&h).is_err(), "groups without a user");
        h.insert(IMPERSONATE_USER, "alice".parse().unwrap());
        h.insert(IMPERSONATE_GROUPS, "eng, ops".parse().unwrap());
        let i = impersonation(&h).unwrap().unwrap();
        assert_eq!(i.user, "alice");
        assert_eq!(i.groups, vec!["eng".to_string(), "ops".to_string()]);
        h.insert(IMPERSONATE_USER, "al ice".parse().unwrap());
        let e = impersonation(&h).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            e.metadata().get("om-reason").unwrap(),
            "INVALID_IMPERSONATION"
        );
    }

    #[test]
    fn request_ids_come_from_the_client_when_usable() {
        let mut h = http::HeaderMap::new();
        let a = request_id(&h);
        assert_ne!(a, request_id(&h));
        h.insert("x-request-id", "gw-42".parse().unwrap());
        assert_eq!(request_id(&h), "gw-42");
        h.insert("x-request-id", "has space".parse().unwrap());
        assert_ne!(request_id(&h), "has space");
    }

    #[test]
    fn without_required_credentials_callers_are_anonymous() {
        let open = Authenticator {
            required: false,
            tokens: None,
            audit: None,
        };
        let p = open.authenticate(&http::HeaderMap::new(), None).unwrap();
        assert_eq!(p.name, "anonymous");
        let closed = Authenticator {
            required: true,
            tokens: Some(
                TokenFile::parse(&format!(
                    "{} ops,eng",
                    token_line("bob", "t0k3n", b"12345678")
                ))
                .unwrap(),
            ),
            audit: None,
        };
        let e = closed
            .authenticate(&http::HeaderMap::new(), None)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            e.metadata().get("om-reason").unwrap(),
            "CREDENTIALS_REQUIRED"
        );
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Bearer t0k3n".parse().unwrap());
        let bob = closed.authenticate(&h, None).unwrap();
        assert_eq!(
            (bob.name.as_str(), &bob.groups[..]),
            ("bob", &["ops".to_string(), "eng".to_string()][..])
        );
        h.insert(
            http::header::AUTHORIZATION,
            "Bearer forged".parse().unwrap(),
        );
        let e = closed.authenticate(&h, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert_eq!(e.metadata().get("om-reason").unwrap(), "INVALID_TOKEN");
        h.insert(
            http::header::AUTHORIZATION,
            "Basic dDBrM24=".parse().unwrap(),
        );
        assert!(closed.authenticate(&h, None).is_err());
    }
}
