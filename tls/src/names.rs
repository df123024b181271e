//! Which host a certificate must name: the host of an address, the name
//! a server there presents, and whether a certificate names it.

use std::io;
use std::net::IpAddr;

use rustls::pki_types::{CertificateDer, ServerName};

/// The host part of `host:port` (brackets around an IPv6 address removed).
pub fn host_of(addr: &str) -> &str {
    let addr = addr
        .strip_prefix("https://")
        .or_else(|| addr.strip_prefix("http://"))
        .unwrap_or(addr);
    let host = match addr.rfind(':') {
        Some(i) if !addr[..i].contains(':') || addr[..i].ends_with(']') => &addr[..i],
        _ => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The name a server at `addr` must present.
pub fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = host_of(addr);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))
}

/// Whether `cert` names the host of any of `addrs` (see `names_host`),
/// parsing the certificate once.
pub fn names_any_host<'a>(
    cert: &CertificateDer<'_>,
    addrs: impl IntoIterator<Item = &'a str>,
) -> bool {
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(cert) else {
        return false;
    };
    addrs.into_iter().any(|a| {
        server_name(a).is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok())
    })
}

/// Whether the end-entity certificate `cert` names the host of `addr` (as a
/// DNS name or an IP address subject alternative name). Only the name is
/// checked: the chain was verified during the handshake.
pub fn names_host(cert: &CertificateDer<'_>, addr: &str) -> bool {
    let Ok(name) = server_name(addr) else {
        return false;
    };
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(cert) else {
        return false;
    };
    rustls::client::verify_server_name(&parsed, &name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_come_out_of_addresses() {
        assert_eq!(host_of("10.0.0.1:9872"), "10.0.0.1");
        assert_eq!(host_of("om-0.om-peers.ns.svc:9872"), "om-0.om-peers.ns.svc");
        assert_eq!(host_of("https://om-0:9862"), "om-0");
        assert_eq!(host_of("[::1]:9872"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
        assert!(matches!(
            server_name("127.0.0.1:1").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("om-1.om-peers:1").unwrap(),
            ServerName::DnsName(_)
        ));
    }
}
