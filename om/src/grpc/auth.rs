//! Who is calling the public gRPC port: a principal from the client's
//! certificate (verified against `--tls-ca` during the TLS handshake) or from
//! a bearer token checked against `--token-file`.
//!
//! The token file holds one line per token, `PRINCIPAL SALT SHA256` with the
//! salt and `SHA-256(salt || token)` in hex (`omctl token hash PRINCIPAL`
//! prints one); blank lines and `#` comments are skipped. The tokens
//! themselves are never stored.
//!
//! `Authenticate` wraps the public services: when credentials are required
//! (a CA or a token file is configured) a request without a valid certificate
//! or token is answered `UNAUTHENTICATED` before its message is decoded, and a
//! served request carries its `Principal` in its extensions.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

/// The identity a request is served for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// How it was established: "certificate", "token" or "none" (no
    /// credentials required).
    pub via: &'static str,
}

/// Longest token file read.
pub const MAX_TOKEN_FILE_BYTES: u64 = 1 << 20;
/// Longest principal name.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Longest bearer token accepted in a request.
pub const MAX_TOKEN_BYTES: usize = 4096;

struct TokenEntry {
    principal: String,
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
            let [principal, salt, hash] = fields[..] else {
                return Err(format!(
                    "line {}: expected PRINCIPAL SALT SHA256, got {} fields",
                    n + 1,
                    fields.len()
                ));
            };
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
        self.entries
            .iter()
            .find(|e| same_digest(&sha256(&e.salt, token.as_bytes()), &e.hash))
            .map(|e| e.principal.as_str())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The name a client certificate stands for: its first DNS subject
/// alternative name, else its subject's common name.
pub fn certificate_principal(der: &[u8]) -> Option<String> {
    use x509_parser::prelude::*;
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                return Some(d.to_string());
            }
        }
    }
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
}

/// What the public port requires of a caller.
pub struct Authenticator {
    /// Credentials are required (a CA or a token file is configured).
    pub required: bool,
    pub tokens: Option<TokenFile>,
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
            return match certificate_principal(cert) {
                Some(name) => Ok(Principal {
                    name,
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
            return match tokens.principal_of(token) {
                Some(name) => Ok(Principal {
                    name: name.to_string(),
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
            via: "none",
        })
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

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let info = req.extensions().get::<crate::net::ConnInfo>();
        match self.auth.authenticate(req.headers(), info) {
            Ok(p) => {
                req.extensions_mut().insert(p);
                Box::pin(self.inner.call(req))
            }
            Err(status) => {
                metrics::counter!("om_unauthenticated_total").increment(1);
                let resp = status.into_http();
                Box::pin(async move { Ok(resp) })
            }
        }
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
    fn without_required_credentials_callers_are_anonymous() {
        let open = Authenticator {
            required: false,
            tokens: None,
        };
        let p = open.authenticate(&http::HeaderMap::new(), None).unwrap();
        assert_eq!(p.name, "anonymous");
        let closed = Authenticator {
            required: true,
            tokens: Some(TokenFile::parse(&token_line("bob", "t0k3n", b"12345678")).unwrap()),
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
        assert_eq!(closed.authenticate(&h, None).unwrap().name, "bob");
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
