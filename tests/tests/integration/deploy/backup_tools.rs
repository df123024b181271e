//! What backup-tools.yaml must satisfy in every rendering.

use super::helpers::*;
use super::render::*;

/// backup-tools.yaml: no replica until asked for; the members' image; its
/// pods taken for no member, nor a member for one of them; the backups'
/// claim mounted read-only; omctl pointed at the client Service by its
/// certificate name, as om-admin (that Certificate's Secret) with TLS, in
/// plaintext without.
pub(crate) fn check_tools(m: &Manifests, e: &Expect, backups: &str, client_grpc: i32) {
    let what = m.what.as_str();
    let tools = m.tools();
    let spec = tools.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(0), "{what}: backup-tools starts at 0");
    let pod = m.tools_pod();
    let t = container(&pod.containers, "tools");
    assert_eq!(t.image, m.om().image, "{what}: one image");
    let csc = t.security_context.as_ref().unwrap();
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|p| p.run_as_non_root),
        Some(true)
    );
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|md| md.labels.clone())
        .unwrap_or_default();
    let own = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(
        selects(&own, &labels),
        "{what}: backup-tools selects its pods"
    );
    assert!(
        !selects(&m.selector(), &labels),
        "{what}: backup-tools' pods would be taken for members"
    );
    let member_labels = m
        .sts()
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .and_then(|md| md.labels.clone())
        .unwrap_or_default();
    assert!(!selects(&own, &member_labels), "{what}");
    assert_eq!(own.get(INSTANCE), Some(&m.sts_name()), "{what}");
    // The backups, read-only.
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.claim_name == backups)
        })
        .unwrap_or_else(|| panic!("{what}: backup-tools mounts no {backups}"));
    let mount = t
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| v.name == vol.name)
        .unwrap_or_else(|| panic!("{what}: backup-tools mounts no {backups}"));
    assert_eq!(mount.read_only, Some(true), "{what}");
    assert_eq!(
        vol.persistent_volume_claim.as_ref().unwrap().read_only,
        Some(true)
    );
    // omctl: the client Service, as the admin.
    let env = container_env(t, "om-backup-tools-0", &m.ns(), m.config());
    assert_eq!(
        env_value(&env, "OM_ENDPOINT"),
        Some(format!("{}:{client_grpc}", m.client_names()[0])),
        "{what}: backup-tools' endpoint"
    );
    if e.tls {
        let cert = env_value(&env, "OM_CERT").expect("OM_CERT");
        let mount = t
            .volume_mounts
            .iter()
            .flatten()
            .find(|v| cert.starts_with(&format!("{}/", v.mount_path)))
            .expect("backup-tools' certificate volume");
        let secret = volume(pod, &mount.name)
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.clone())
            .expect("backup-tools' certificate is a Secret");
        let (_, admin) = m
            .certificates
            .iter()
            .find(|(_, c)| c.secret_name == secret)
            .unwrap_or_else(|| panic!("{what}: no Certificate writes the Secret {secret}"));
        assert_eq!(admin.common_name.as_deref(), Some("om-admin"), "{what}");
        for (var, file) in [
            ("OM_CACERT", "ca.crt"),
            ("OM_CERT", "tls.crt"),
            ("OM_KEY", "tls.key"),
        ] {
            assert_eq!(
                env_value(&env, var),
                Some(format!("{}/{file}", mount.mount_path)),
                "{what}: {var}"
            );
        }
    } else {
        for k in ["OM_CACERT", "OM_CERT", "OM_KEY"] {
            assert_eq!(env_value(&env, k), None, "{what}: {k}");
        }
        assert!(
            pod.volumes.iter().flatten().all(|v| v.secret.is_none()),
            "{what}: no certificate Secret without TLS"
        );
    }
}
