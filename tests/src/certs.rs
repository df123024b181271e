//! Certificates for TLS tests: a CA and the leaf certificates it signs,
//! written as PEM files.

use std::path::{Path, PathBuf};

/// A test certificate authority.
pub struct TestCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// The CA certificate as PEM.
    pub pem: String,
}

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate's DER bytes, to recognize it on the wire.
    pub der: Vec<u8>,
    /// Its serial number (what a revocation list names).
    pub serial: u64,
}

/// Serial numbers of the certificates issued in this process.
static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa { params, key, pem }
    }

    /// Writes the CA certificate to `dir/NAME.crt`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(format!("{name}.crt"));
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    /// A certificate for `names` (DNS names or IP addresses), valid now,
    /// written to `dir/STEM.crt` and `dir/STEM.key`.
    pub fn issue(&self, dir: &Path, stem: &str, names: &[&str]) -> Issued {
        self.issue_with(dir, stem, names, |_| {})
    }

    /// A member's certificate for `names`: it also carries the member
    /// marker (`urn:om:member`), without which the Raft port refuses it.
    pub fn issue_member(&self, dir: &Path, stem: &str, names: &[&str]) -> Issued {
        self.issue_with(dir, stem, names, |p| {
            p.subject_alt_names.push(rcgen::SanType::URI(
                om::grpc::peer::MEMBER_MARKER.try_into().unwrap(),
            ));
        })
    }

    /// A certificate for `names` whose subject's Organization is `group`
    /// (the group om takes the holder to be in).
    pub fn issue_in_group(&self, dir: &Path, stem: &str, names: &[&str], group: &str) -> Issued {
        self.issue_with(dir, stem, names, |p| {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, group);
        })
    }

    /// A certificate for `names` that expired in 2020.
    pub fn issue_expired(&self, dir: &Path, stem: &str, names: &[&str]) -> Issued {
        self.issue_with(dir, stem, names, |p| {
            p.not_before = rcgen::date_time_ymd(2019, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 1, 1);
        })
    }

    /// Writes (replacing it in one rename) `dir/NAME.crl`: this CA's
    /// revocation list naming `revoked`.
    pub fn write_crl(&self, dir: &Path, name: &str, revoked: &[&Issued]) -> PathBuf {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: (revoked.len() as u64 + 1).into(),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|c| rcgen::RevokedCertParams {
                    serial_number: c.serial.into(),
                    revocation_time: rcgen::date_time_ymd(2020, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let crl = params.signed_by(&issuer).unwrap();
        let p = dir.join(format!("{name}.crl"));
        replace(&p, crl.pem().unwrap().as_bytes());
        p
    }

    fn issue_with(
        &self,
        dir: &Path,
        stem: &str,
        names: &[&str],
        tweak: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().copied().unwrap_or(stem),
        );
        let serial = NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        p.serial_number = Some(serial.into());
        tweak(&mut p);
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = p.signed_by(&key, &issuer).unwrap();
        let out = Issued {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
            der: cert.der().to_vec(),
            serial,
        };
        // Key first, then certificate, each replaced in one rename, as a
        // Secret update swaps its files.
        replace(&out.key, key.serialize_pem().as_bytes());
        replace(&out.cert, cert.pem().as_bytes());
        out
    }
}

fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
