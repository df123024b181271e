//! Who is calling the public gRPC port: a principal from the client's
//! certificate (verified against `--tls-ca` during the TLS handshake) or from
//! a bearer token checked against `--token-file`.
//!
//! Tokens and their file are described in `tokens`. A certificate's groups
//! are its subject's Organization (O) attributes, as Kubernetes reads them.
//!
//! `Authenticate` wraps the public services: when credentials are required
//! (a CA or a token file is configured) a request without a valid certificate
//! or token is answered `UNAUTHENTICATED` before its message is decoded (and
//! audited); a served request runs inside an `authz::RequestCtx` naming its
//! principal, the user it impersonates (`om-impersonate-user`,
//! `om-impersonate-groups`), its operation and request id (`x-request-id`
//! when usable, else generated), which the response returns in
//! `om-request-id`.

use std::sync::Arc;

use tonic::Status;
use tonic::codegen::http;

pub use crate::authz::Principal;
use crate::authz::{Impersonation, MAX_GROUPS, RequestCtx, valid_name};

use super::guard::{Answer, Guard, Guarded, Refusal};
use super::tokens::FailureLimiter;
pub use super::tokens::{
    MAX_PRINCIPAL_BYTES, MAX_TOKEN_BYTES, TokenFile, TokenStore, new_token, token_line,
};

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
    pub tokens: Option<Arc<TokenStore>>,
    /// Where refusals are audited.
    pub audit: Option<Arc<crate::audit::AuditLog>>,
    /// Failed authentications per source.
    pub failures: FailureLimiter,
}

impl Authenticator {
    pub fn new(
        required: bool,
        tokens: Option<Arc<TokenStore>>,
        audit: Option<Arc<crate::audit::AuditLog>>,
    ) -> Self {
        Authenticator {
            required,
            tokens,
            audit,
            failures: FailureLimiter::default(),
        }
    }
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
        let source = info.and_then(|i| i.remote).map(|a| a.ip());
        let r = self.check_credentials(headers, info);
        let Err(e) = &r else { return r };
        // Coming without credentials costs nothing to check: not counted.
        if e.metadata().get("om-reason").and_then(|v| v.to_str().ok())
            == Some("CREDENTIALS_REQUIRED")
        {
            return r;
        }
        // A source past its allowance of failures gets a refusal that says
        // so (and is not audited); its valid credentials still work, so
        // clients sharing its address are not locked out.
        if !self.failures.admits(source) {
            metrics::counter!("om_auth_failures_limited_total").increment(1);
            return Err(super::refusal(
                tonic::Code::ResourceExhausted,
                "TOO_MANY_AUTH_FAILURES",
                "authorization",
                "too many failed authentications from this address; retry later",
            ));
        }
        self.failures.failed(source);
        r
    }

    fn check_credentials(
        &self,
        headers: &http::HeaderMap,
        info: Option<&crate::net::ConnInfo>,
    ) -> Result<Principal, Status> {
        if let Some(cert) = info
            .and_then(|i| i.peer_certs.as_ref())
            .and_then(|c| c.first())
        {
            return match certificate_identity(cert) {
                Some((name, _)) if name.len() > MAX_PRINCIPAL_BYTES || !valid_name(&name) => {
                    Err(super::refusal(
                        tonic::Code::Unauthenticated,
                        "INVALID_CERTIFICATE_NAME",
                        "",
                        "the client certificate's name (first DNS name, else common name) must \
                         be 1 to 256 bytes without whitespace, control characters, ',' or ':'",
                    ))
                }
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
            return match tokens.current().entry_of(token) {
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
        if reason == "TOO_MANY_AUTH_FAILURES" {
            // Counted in om_auth_failures_limited_total; the source's first
            // failures are in the log already.
            return;
        }
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

/// Wraps a public service: authenticates every request before it is decoded.
pub type Authenticate<S> = Guarded<S, Arc<Authenticator>>;

/// A request that passed authentication: its context, its id for the
/// response's `om-request-id`, and where the service leaves the staleness
/// of a stale read it served.
pub struct Authenticated {
    ctx: RequestCtx,
    header: Option<http::HeaderValue>,
    staleness: Arc<std::sync::atomic::AtomicU64>,
    leader_hint: Arc<std::sync::OnceLock<String>>,
}

impl Guard for Arc<Authenticator> {
    type Admitted = Authenticated;

    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<Authenticated, Refusal> {
        let info = req.extensions().get::<crate::net::ConnInfo>();
        let operation = super::guard::method(req).to_string();
        let request_id = request_id(req.headers());
        let refused = |status: Status| {
            let mut resp = status.into_http();
            if let Ok(v) = request_id.parse() {
                resp.headers_mut().insert("om-request-id", v);
            }
            Box::new(resp)
        };
        let principal = match self.authenticate(req.headers(), info) {
            Ok(p) => {
                // An authenticated request proves its connection.
                if let Some(prove) = info.and_then(|i| i.prove.as_ref()) {
                    prove.call();
                }
                p
            }
            Err(status) => {
                metrics::counter!("om_unauthenticated_total").increment(1);
                self.audit_refusal(&operation, request_id.clone(), None, &status);
                return Err(refused(status));
            }
        };
        let impersonate = match impersonation(req.headers()) {
            Ok(i) => i,
            Err(status) => {
                self.audit_refusal(&operation, request_id.clone(), Some(&principal), &status);
                return Err(refused(status));
            }
        };
        let header = request_id.parse().ok();
        let staleness = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        let leader_hint = Arc::new(std::sync::OnceLock::new());
        Ok(Authenticated {
            ctx: RequestCtx {
                principal,
                impersonate,
                operation,
                request_id,
                staleness_ms: staleness.clone(),
                leader_hint: leader_hint.clone(),
            },
            header,
            staleness,
            leader_hint,
        })
    }

    /// Runs the call in the request's context (`authz::scope`) and names the
    /// request id, any read staleness and the leader a write was forwarded
    /// to in the response's headers.
    fn run(&self, a: Authenticated, call: Answer) -> Answer {
        let fut = crate::authz::scope(a.ctx, call);
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some(v) = a.header {
                resp.headers_mut().insert("om-request-id", v);
            }
            let age = a.staleness.load(std::sync::atomic::Ordering::Relaxed);
            if age != u64::MAX {
                resp.headers_mut()
                    .insert("om-read-staleness-ms", http::HeaderValue::from(age));
            }
            if let Some(v) = a.leader_hint.get().and_then(|l| l.parse().ok()) {
                resp.headers_mut().insert("om-leader", v);
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let open = Authenticator::new(false, None, None);
        let p = open.authenticate(&http::HeaderMap::new(), None).unwrap();
        assert_eq!(p.name, "anonymous");
        const BOB: &str = "omt_0123456789abcdef_t0k3nt0k3nt0k3nt0k3nt0k3nt0k3nt0k3n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            format!("{} ops,eng", token_line("bob", BOB, b"12345678")),
        )
        .unwrap();
        let closed = Authenticator::new(true, Some(TokenStore::load(&file).unwrap()), None);
        let e = closed
            .authenticate(&http::HeaderMap::new(), None)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            e.metadata().get("om-reason").unwrap(),
            "CREDENTIALS_REQUIRED"
        );
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {BOB}").parse().unwrap(),
        );
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

    /// A source whose attempts keep failing gets TOO_MANY_AUTH_FAILURES for
    /// its failures, while a valid token from the same address still works.
    #[test]
    fn failed_attempts_are_limited_per_source() {
        const T: &str = "omt_00000000000000aa_validvalidvalidvalidvalidvalidvalid";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, token_line("carol", T, b"12345678")).unwrap();
        let mut auth = Authenticator::new(true, Some(TokenStore::load(&file).unwrap()), None);
        // No refill to speak of during the test.
        auth.failures = FailureLimiter::new(super::super::tokens::FAILURE_BURST, 0.001);
        let from = |ip: &str| crate::net::ConnInfo {
            remote: Some(format!("{ip}:4000").parse().unwrap()),
            peer_certs: None,
            close: None,
            prove: None,
        };
        let bearer = |t: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(
                http::header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
            h
        };
        let (attacker, user) = (from("192.0.2.7"), from("192.0.2.8"));
        let reason = |r: Result<Principal, Status>| {
            r.unwrap_err()
                .metadata()
                .get("om-reason")
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        };
        for _ in 0..super::super::tokens::FAILURE_BURST as usize {
            let r = auth.authenticate(
                &bearer("omt_00000000000000aa_forgedforgedforgedforgedforged00"),
                Some(&attacker),
            );
            assert_eq!(reason(r), "INVALID_TOKEN");
        }
        let forged = bearer("omt_00000000000000aa_forgedforgedforgedforgedforged00");
        let r = auth.authenticate(&forged, Some(&attacker));
        assert_eq!(reason(r), "TOO_MANY_AUTH_FAILURES");
        let r = auth.authenticate(&forged, Some(&user));
        assert_eq!(
            reason(r),
            "INVALID_TOKEN",
            "another address has its own allowance"
        );
        let carol = auth.authenticate(&bearer(T), Some(&attacker)).unwrap();
        assert_eq!(
            carol.name, "carol",
            "valid tokens from the address still work"
        );
    }
}
