//! Virtual-host style addressing: a request to `BUCKET.DOMAIN` (for a
//! configured base domain) names the bucket in its host; any other host
//! (an IP address, `localhost`, a load balancer's name) is path style.
//! s3s's own parsers take an unknown host for a bucket name (CNAME style),
//! which would turn every path-style request by host name into a request
//! for a bucket named like the host.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

/// The base domains of virtual-host style requests.
pub struct Domains(Vec<String>);

impl Domains {
    /// `domains` lowercase, without ports.
    pub fn new(domains: Vec<String>) -> Domains {
        Domains(domains)
    }
}

/// `host` without its port (`[v6]:port` and `name:port` alike).
fn without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(h, _)| &h[1..]);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// The bucket `host` names under `domain`: `Some(None)` for the domain
/// itself, `Some(Some(bucket))` for a subdomain, `None` when unrelated.
fn split<'a>(host: &'a str, domain: &str) -> Option<Option<&'a str>> {
    if host.eq_ignore_ascii_case(domain) {
        return Some(None);
    }
    let cut = host.len().checked_sub(domain.len() + 1)?;
    let (bucket, rest) = (host.get(..cut)?, host.get(cut..)?);
    (rest.starts_with('.') && rest[1..].eq_ignore_ascii_case(domain) && !bucket.is_empty())
        .then_some(Some(bucket))
}

impl Domains {
    /// The bucket `host` names, if it is `BUCKET.DOMAIN`.
    pub fn bucket<'a>(&self, host: &'a str) -> Option<&'a str> {
        let name = without_port(host);
        self.0.iter().find_map(|d| split(name, d).flatten())
    }
}

/// The domains, shared between s3s and the front end.
pub struct Shared(pub std::sync::Arc<Domains>);

impl S3Host for Shared {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        self.0.parse_host_header(host)
    }
}

impl S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = without_port(host);
        for d in &self.0 {
            match split(name, d) {
                Some(Some(bucket)) => return Ok(VirtualHost::new(d.as_str()).with_bucket(bucket)),
                Some(None) => return Ok(VirtualHost::new(d.as_str())),
                None => {}
            }
        }
        Ok(VirtualHost::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let d = Domains::new(vec!["s3.localhost".into(), "s3.example.com".into()]);
        let b = |h: &str| d.parse_host_header(h).unwrap().bucket().map(str::to_string);
        assert_eq!(b("photos.s3.localhost:9878").as_deref(), Some("photos"));
        assert_eq!(b("a.b.s3.example.com").as_deref(), Some("a.b"));
        assert_eq!(b("S3.Example.COM"), None);
        assert_eq!(b("s3.localhost"), None);
        assert_eq!(b("localhost:9878"), None);
        assert_eq!(b("xs3.localhost"), None);
        assert_eq!(b("gateway.internal"), None);
        assert_eq!(d.bucket("photos.s3.localhost:9878"), Some("photos"));
        assert_eq!(d.bucket("s3.localhost"), None);
        assert_eq!(without_port("[::1]:9878"), "::1");
        assert_eq!(without_port("host"), "host");
    }
}
