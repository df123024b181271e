//! The mutual-TLS part of a rendering: the pods' and the backup job's
//! certificates, and the approver policies that admit them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use om_tests::certs::TestCa;

use super::crds::PolicySpec;
use super::helpers::*;
use super::render::*;

/// The mutual-TLS part of a rendering: each pod's CSI volume asks a CA
/// Issuer of the rendering for a certificate with the member marker that
/// names its own address (and no other member's, as om matches them) and
/// the client Service; om's TLS files are that volume's; the backup job's
/// volume asks the same Issuer for an admin's client certificate, which
/// omctl's TLS files are; the Certificates' Issuers and Secrets follow
/// their names.
pub(crate) fn check_certificates(
    m: &Manifests,
    c: &Container,
    env: &[(String, String)],
    members: &[om::config::InitialMember],
    admins: &BTreeSet<String>,
) {
    let what = m.what.as_str();
    let ns = m.ns();
    let name = m.sts_name();
    let pod = m.pod();
    let tls_cert = env_value(env, "OM_TLS_CERT").expect("OM_TLS_CERT");
    let tls_mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| tls_cert.starts_with(&format!("{}/", v.mount_path)))
        .expect("the certificate's volume");
    let tls = csi_volume(pod, &tls_mount.name);
    let attr = |key: &str| csi_attribute(tls, key);
    assert_eq!(tls.read_only, Some(true), "the CSI driver mounts read-only");
    assert_eq!(attr("issuer-kind"), "Issuer");
    let issuer = attr("issuer-name");
    assert!(
        m.issuers.iter().any(|(n, s)| n == issuer && s.ca.is_some()),
        "{what}: {issuer} is a CA Issuer"
    );
    // The Raft port admits only certificates with the member marker.
    assert_eq!(
        split_list(attr("uri-sans")),
        vec![om::grpc::peer::MEMBER_MARKER.to_string()]
    );
    let usages = split_list(attr("key-usages"));
    for u in ["server auth", "client auth"] {
        assert!(usages.iter().any(|x| x == u), "{usages:?} lacks {u}");
    }
    assert_eq!(attr("key-algorithm"), "ECDSA");
    assert_eq!(attr("key-size"), "256");
    let hours = |key: &str| -> u64 {
        attr(key)
            .strip_suffix('h')
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("{key}: whole hours expected"))
    };
    assert!(
        hours("renew-before") < hours("duration"),
        "renewed before it expires"
    );
    let tls_dir = format!("{}/", tls_mount.mount_path);
    for (key, var) in [
        ("certificate-file", "OM_TLS_CERT"),
        ("privatekey-file", "OM_TLS_KEY"),
        ("ca-file", "OM_TLS_CA"),
    ] {
        assert_eq!(
            env_value(env, var)
                .as_deref()
                .and_then(|p| p.strip_prefix(&tls_dir)),
            Some(attr(key)),
            "{var}"
        );
    }
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(
        Some(attr("fs-group").parse::<i64>().unwrap()),
        psc.fs_group,
        "the key is readable by om's group only"
    );
    // Pod NAME-i's certificate names member i's Raft host and no other
    // member's (om binds a request to the members whose hosts the
    // certificate names: checked with om's own matching), its short peer
    // name, no wildcard, and the client Service, which clients verify.
    let ca = TestCa::new("om cluster CA");
    let issued = tempfile::tempdir().unwrap();
    let [client_fqdn, client_svc] = m.client_names();
    for (i, mem) in members.iter().enumerate() {
        let host = m.peer_host(i);
        assert_eq!(om_tls::host_of(&mem.raft_addr), host);
        assert_eq!(om_tls::host_of(&mem.grpc_addr), host);
        let names = csi_dns_names(tls, &format!("{name}-{i}"), &ns);
        assert!(names.iter().all(|n| !n.contains('*')), "{names:?}");
        for n in [
            host.clone(),
            format!("{name}-{i}.{}.{ns}.svc", m.peer_service()),
            client_fqdn.clone(),
            client_svc.clone(),
        ] {
            assert!(names.contains(&n), "{what}: {names:?} lacks {n}");
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let cert = ca.issue_member(issued.path(), &format!("{name}-{i}"), &refs);
        let der = om_tls::rustls::pki_types::CertificateDer::from(cert.der);
        for (j, other) in members.iter().enumerate() {
            assert_eq!(
                om_tls::names_any_host(&der, [other.raft_addr.as_str()]),
                i == j,
                "{what}: {name}-{i}'s certificate and member {}",
                other.id
            );
        }
    }
    // Issuers exist, referred to by their names; each Certificate's Secret
    // is named after it. A Secret is readable by whoever reads the
    // namespace's Secrets: none carries the member marker or a wildcard.
    for (n, cert) in &m.certificates {
        assert!(
            m.issuers.iter().any(|(i, _)| *i == cert.issuer_ref.name),
            "{what}: {n}: no Issuer {}",
            cert.issuer_ref.name
        );
        assert_eq!(cert.issuer_ref.kind, "Issuer");
        assert_eq!(&cert.secret_name, n, "{what}: {n}'s Secret");
        assert!(
            cert.uris
                .iter()
                .flatten()
                .all(|u| u != om::grpc::peer::MEMBER_MARKER),
            "{n}"
        );
        assert!(
            cert.dns_names.iter().flatten().all(|d| !d.contains('*')),
            "{n}"
        );
    }
    for (n, spec) in &m.issuers {
        if let Some(ca_issuer) = &spec.ca {
            assert!(
                m.certificates
                    .iter()
                    .any(|(_, c)| c.is_ca == Some(true) && c.secret_name == ca_issuer.secret_name),
                "{what}: Issuer {n} signs with the CA Certificate's Secret"
            );
        }
    }
    assert!(m.issuers.iter().any(|(_, s)| s.self_signed.is_some()));
    // The backup job's client certificate: from the same Issuer, an admin
    // (its first DNS name is its principal), no member marker, client
    // auth only; omctl's TLS files are on that volume.
    let job = m.job_pod();
    let b = m.backup();
    let job_env = container_env(b, "om-backup-0", &ns, m.config());
    let cacert = env_value(&job_env, "OM_CACERT").expect("OM_CACERT");
    let job_mount = b
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| cacert.starts_with(&format!("{}/", v.mount_path)))
        .expect("omctl's certificate volume");
    let job_tls = csi_volume(job, &job_mount.name);
    let jattr = |key: &str| csi_attribute(job_tls, key);
    assert_eq!(jattr("issuer-name"), issuer);
    assert_eq!(jattr("issuer-kind"), "Issuer");
    let principal = jattr("common-name");
    assert_eq!(
        split_list(jattr("dns-names")).first().map(String::as_str),
        Some(principal),
        "{what}: the principal is the first DNS name, as om reads it"
    );
    assert!(
        admins.contains(principal),
        "{what}: {principal} is an admin"
    );
    assert!(
        !job_tls
            .volume_attributes
            .as_ref()
            .unwrap()
            .contains_key(&format!("{CSI_DRIVER}/uri-sans")),
        "{what}: the backup job is no member"
    );
    let usages = split_list(jattr("key-usages"));
    assert!(usages.iter().any(|u| u == "client auth"));
    assert!(!usages.iter().any(|u| u == "server auth"));
    let job_dir = format!("{}/", job_mount.mount_path);
    for (key, var) in [
        ("certificate-file", "OM_CERT"),
        ("privatekey-file", "OM_KEY"),
        ("ca-file", "OM_CACERT"),
    ] {
        assert_eq!(
            env_value(&job_env, var)
                .as_deref()
                .and_then(|p| p.strip_prefix(&job_dir)),
            Some(jattr(key)),
            "{var}"
        );
    }
    // Every admin is a Certificate's name or the backup job's.
    for a in admins {
        assert!(
            a == principal
                || m.certificates
                    .iter()
                    .any(|(_, c)| c.common_name.as_deref() == Some(a.as_str())),
            "{what}: admin {a} has no certificate here"
        );
    }
}

/// The approver policies of a rendering: the member policy allows what
/// every pod's CSI volume asks om-ca for, its CEL rule names this
/// instance's StatefulSet, Services, namespace and domain, and only the
/// CSI driver may use it; the backup job's CSI volume is allowed by a
/// policy of its own admitting no member marker, also for the CSI driver
/// only; every Certificate of certificates.yaml is allowed by a policy of
/// its own that admits no member marker, used only by cert-manager's
/// controller. Every policy selects this namespace and an Issuer of it;
/// approver-policy may approve for exactly its Issuers; the cluster-scoped
/// names end in the namespace.
pub(crate) fn check_approver_policy(m: &Manifests) {
    let what = m.what.as_str();
    let ns = m.ns();
    let sts_name = m.sts_name();
    let replicas = m.replicas();
    let policies: Vec<(String, &PolicySpec)> = m
        .policies
        .iter()
        .map(|(md, p)| (md.name.clone().unwrap(), p))
        .collect();
    assert_eq!(policies.len(), 4, "{what}: four policies");
    // Roles and ClusterRoles by name; bindings as (role name, subjects).
    let mut roles: Vec<(String, Vec<PolicyRule>)> = Vec::new();
    let mut bindings: Vec<(String, Vec<Subject>)> = Vec::new();
    for r in &m.roles {
        assert_eq!(r.metadata.namespace.as_deref(), Some(ns.as_str()), "{what}");
        roles.push((
            r.metadata.name.clone().unwrap(),
            r.rules.clone().unwrap_or_default(),
        ));
    }
    for r in &m.cluster_roles {
        roles.push((
            r.metadata.name.clone().unwrap(),
            r.rules.clone().unwrap_or_default(),
        ));
    }
    for b in &m.role_bindings {
        assert_eq!(b.metadata.namespace.as_deref(), Some(ns.as_str()), "{what}");
        assert!(
            m.roles
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())),
            "{what}: no Role {}",
            b.role_ref.name
        );
        bindings.push((
            b.role_ref.name.clone(),
            b.subjects.clone().unwrap_or_default(),
        ));
    }
    for b in &m.cluster_role_bindings {
        assert!(
            m.cluster_roles
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())),
            "{what}: no ClusterRole {}",
            b.role_ref.name
        );
        bindings.push((
            b.role_ref.name.clone(),
            b.subjects.clone().unwrap_or_default(),
        ));
    }
    // Cluster-scoped names end in the namespace.
    for n in policies
        .iter()
        .map(|(n, _)| n.clone())
        .chain(
            m.cluster_roles
                .iter()
                .map(|r| r.metadata.name.clone().unwrap()),
        )
        .chain(
            m.cluster_role_bindings
                .iter()
                .map(|r| r.metadata.name.clone().unwrap()),
        )
    {
        assert!(
            n.ends_with(&format!(".{ns}")),
            "{what}: {n} is cluster-scoped"
        );
    }
    // Every policy: this namespace, an Issuer of this rendering.
    for (n, p) in &policies {
        let sel = &p.selector;
        assert_eq!(
            sel.namespace.as_ref().and_then(|x| x.match_names.clone()),
            Some(vec![ns.clone()]),
            "{what}: {n}"
        );
        let issuer = sel
            .issuer_ref
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        assert!(
            m.issuers.iter().any(|(i, _)| *i == issuer),
            "{what}: {n} selects no Issuer of the instance ({issuer})"
        );
    }
    // approver-policy may approve for the instance's Issuers.
    let signers: BTreeSet<String> = m
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.clone().unwrap_or_default())
        .filter(|r| r.verbs.iter().any(|v| v == "approve"))
        .flat_map(|r| r.resource_names.clone().unwrap_or_default())
        .collect();
    let issuers: BTreeSet<String> = m
        .issuers
        .iter()
        .map(|(i, _)| format!("issuers.cert-manager.io/{ns}.{i}"))
        .collect();
    assert_eq!(signers, issuers, "{what}");

    // Who may use policy `name`: the subjects bound to a role granting
    // `use` on it.
    let users = |name: &str| -> Vec<String> {
        let granting: Vec<&str> = roles
            .iter()
            .filter(|(_, rules)| {
                rules.iter().any(|r| {
                    r.verbs.iter().any(|v| v == "use")
                        && r.resources
                            .iter()
                            .flatten()
                            .any(|x| x == "certificaterequestpolicies")
                        && r.resource_names
                            .as_ref()
                            .is_none_or(|names| names.iter().any(|x| x == name))
                })
            })
            .map(|(role, _)| role.as_str())
            .collect();
        bindings
            .iter()
            .filter(|(role, _)| granting.contains(&role.as_str()))
            .flat_map(|(_, subjects)| subjects.iter().map(|s| format!("{}:{}", s.kind, s.name)))
            .collect()
    };
    let selected_issuer =
        |p: &PolicySpec| p.selector.issuer_ref.as_ref().and_then(|r| r.name.clone());

    // The member policy: for the CSI volume's issuer, the member marker
    // required, every name and usage a pod's volume asks for allowed, the
    // key it makes.
    let tls = csi_volume(m.pod(), "tls");
    let issuer = csi_attribute(tls, "issuer-name");
    let (member_name, member) = policies
        .iter()
        .find(|(_, p)| {
            selected_issuer(p).as_deref() == Some(issuer)
                && p.allowed.as_ref().is_some_and(|a| a.uris.is_some())
        })
        .expect("a policy for the members' certificates");
    let allowed = member.allowed.as_ref().unwrap();
    let uris = allowed.uris.as_ref().unwrap();
    assert_eq!(
        uris.values.as_deref(),
        Some(&[om::grpc::peer::MEMBER_MARKER.to_string()][..])
    );
    assert_eq!(uris.required, Some(true), "{member_name}");
    let dns = allowed
        .dns_names
        .as_ref()
        .and_then(|d| d.values.clone())
        .unwrap_or_default();
    for i in 0..replicas {
        for n in csi_dns_names(tls, &format!("{sts_name}-{i}"), &ns) {
            assert!(
                dns.iter().any(|p| wildcard(p, &n)),
                "{what}: {member_name} refuses {n}"
            );
        }
    }
    // The wildcard stands for an ordinal: the rule names this instance.
    let client = m.client_service().metadata.name.clone().unwrap();
    let peers = m.peer_service();
    let domain = m.domain();
    let rule = format!(
        "self.matches('^' + '{sts_name}' + '-[0-9]+[.]' + '{peers}' + '[.]' + '{ns}' + \
         '[.]svc([.]' + '{domain}' + ')?$') || \
         self == '{client}' + '.' + '{ns}' + '.svc.' + '{domain}' || \
         self == '{client}' + '.' + '{ns}' + '.svc'"
    );
    let rules: Vec<String> = allowed
        .dns_names
        .as_ref()
        .and_then(|d| d.validations.as_ref())
        .map(|v| v.iter().map(|v| v.rule.clone()).collect())
        .unwrap_or_default();
    assert_eq!(rules, vec![rule], "{what}: {member_name}'s rule");
    let usages = allowed.usages.clone().unwrap_or_default();
    for u in split_list(csi_attribute(tls, "key-usages")) {
        assert!(usages.contains(&u), "{member_name} refuses usage {u}");
    }
    let key = member
        .constraints
        .as_ref()
        .and_then(|c| c.private_key.as_ref())
        .expect("a key constraint");
    assert_eq!(
        key.algorithm.as_deref(),
        Some(csi_attribute(tls, "key-algorithm"))
    );
    assert_eq!(
        users(member_name.as_str()),
        vec!["ServiceAccount:cert-manager-csi-driver".to_string()]
    );

    // The backup job's client certificate: a policy of its own for the
    // same issuer, allowing its name, names and usages and no URI (so no
    // member marker), used only by the CSI driver.
    let job_tls = csi_volume(m.job_pod(), "tls");
    let principal = csi_attribute(job_tls, "common-name");
    let (backup_name, backup) = policies
        .iter()
        .find(|(_, p)| {
            selected_issuer(p).as_deref() == Some(csi_attribute(job_tls, "issuer-name"))
                && p.allowed
                    .as_ref()
                    .and_then(|a| a.common_name.as_ref())
                    .and_then(|c| c.value.as_deref())
                    == Some(principal)
        })
        .expect("a policy for the backup job's certificate");
    assert_ne!(backup_name, member_name);
    let a = backup.allowed.as_ref().unwrap();
    assert!(a.uris.is_none(), "{backup_name} allows URIs");
    let names = a
        .dns_names
        .as_ref()
        .and_then(|d| d.values.clone())
        .unwrap_or_default();
    for n in split_list(csi_attribute(job_tls, "dns-names")) {
        assert!(
            names.iter().any(|p| wildcard(p, &n)),
            "{backup_name} refuses {n}"
        );
    }
    let usages = a.usages.clone().unwrap_or_default();
    for u in split_list(csi_attribute(job_tls, "key-usages")) {
        assert!(usages.contains(&u), "{backup_name} refuses usage {u}");
    }
    assert_eq!(
        users(backup_name.as_str()),
        vec!["ServiceAccount:cert-manager-csi-driver".to_string()]
    );

    // Each Certificate: a policy for its issuer and common name, not the
    // member policy, allowing no URI (so no member marker), used only by
    // cert-manager's controller.
    for (n, cert) in &m.certificates {
        let (policy_name, policy) = policies
            .iter()
            .find(|(_, p)| {
                selected_issuer(p).as_deref() == Some(cert.issuer_ref.name.as_str())
                    && p.allowed
                        .as_ref()
                        .and_then(|a| a.common_name.as_ref())
                        .and_then(|c| c.value.as_deref())
                        == cert.common_name.as_deref()
            })
            .unwrap_or_else(|| panic!("no policy allows Certificate {n}"));
        assert_ne!(policy_name, member_name);
        let a = policy.allowed.as_ref().unwrap();
        assert!(a.uris.is_none(), "{policy_name} allows URIs");
        assert_eq!(a.is_ca.unwrap_or(false), cert.is_ca.unwrap_or(false));
        let who = users(policy_name.as_str());
        assert!(
            !who.is_empty() && who.iter().all(|u| u == "ServiceAccount:cert-manager"),
            "{policy_name}: {who:?}"
        );
    }
}
