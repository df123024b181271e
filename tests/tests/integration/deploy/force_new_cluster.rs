//! `deploy/scripts/force-new-cluster.sh`, the majority-loss runbook on
//! Kubernetes, run against a stand-in `kubectl` that records every call and
//! answers the script's reads as a cluster would: the lost members' claims
//! are deleted after their pods are gone and before the survivor starts
//! forced, the survivor's claim never; the flag is set only for the
//! survivor and cleared before the others come back; a dry run changes
//! nothing. And the flag the script sets is what the members' container
//! reads: only the pod it names starts with OM_FORCE_NEW_CLUSTER.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use super::helpers::*;
use super::render::*;

/// A stand-in for kubectl: records each call's arguments, one line each,
/// in $KUBECTL_LOG, and answers the script's reads: StatefulSet $STUB_STS
/// with 3 replicas, its peer Service $STUB_STS-peers and ConfigMap
/// $STUB_STS-config (cluster domain $STUB_DOMAIN), the claims
/// $STUB_CLAIMS, and its pods as the last `--replicas=N` in the log left
/// them (3 before any), beside a pod of another workload.
const STUB: &str = r#"#!/bin/sh
log=$KUBECTL_LOG
printf '%s\n' "$*" >>"$log"
scaled=$(grep -o -e '--replicas=[0-9]*' "$log" | tail -n 1 | cut -d= -f2)
case "$*" in
*" get statefulset "*"{.spec.replicas}"*) echo 3 ;;
*" get statefulset "*'"REPLICAS"'*) echo 3 ;;
*" get statefulset "*"{.spec.serviceName}"*) echo "$STUB_STS-peers" ;;
*" get statefulset "*"{.spec.podManagementPolicy}"*) echo Parallel ;;
*" get statefulset "*"configMap.name"*) echo "$STUB_STS-config" ;;
*" get statefulset "*) echo "statefulset.apps/$STUB_STS" ;;
*" get configmap "*"{.data.cluster_domain}"*) echo "$STUB_DOMAIN" ;;
*" get configmap "*) echo '{"cluster_domain":"x","force_new_cluster":""}' ;;
*" get cronjob "*) echo "cronjob.batch/$STUB_STS-backup" ;;
*" get pvc "*) printf '%s\n' $STUB_CLAIMS ;;
*" get pods "*)
    i=0
    while [ "$i" -lt "${scaled:-3}" ]; do echo "$STUB_STS-$i"; i=$((i + 1)); done
    echo "$STUB_STS-backup-tools-5d8f9-x2x4k"
    ;;
esac
exit 0
"#;

fn script() -> PathBuf {
    deploy_dir().join("scripts/force-new-cluster.sh")
}

/// The script run with `args` against the stand-in, for StatefulSet `sts`
/// with claims `claims`: what it printed, and the kubectl calls it made.
fn run(args: &[&str], sts: &str, claims: &[&str]) -> (Output, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let kubectl = dir.path().join("kubectl");
    std::fs::write(&kubectl, STUB).unwrap();
    std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, "").unwrap();
    let out = Command::new("/bin/sh")
        .arg(script())
        .args(args)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
        .env("KUBECTL_LOG", &log)
        .env("STUB_STS", sts)
        .env("STUB_DOMAIN", "k8s.example.internal")
        .env("STUB_CLAIMS", claims.join(" "))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (out, calls)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The index of the first call containing every one of `parts`.
fn position(calls: &[String], parts: &[&str]) -> usize {
    calls
        .iter()
        .position(|c| parts.iter().all(|p| c.contains(p)))
        .unwrap_or_else(|| panic!("no call with {parts:?} in {calls:#?}"))
}

/// Calls that change the cluster (all but reads and waits).
fn changes(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| !c.contains(" get ") && !c.contains(" wait "))
        .collect()
}

/// Survivor 1 of 3 under a prefix: suspend the backups, scale to 0, wait
/// for the pods to go, delete data-…-0 and data-…-2 (never data-…-1, nor
/// the archive claims or another StatefulSet's), set the flag for pod 1,
/// scale to 2 (ordinals 0 and 1), wait for pod 1 to be Ready, clear the
/// flag, scale back to 3; then print add-node for nodes 1 and 3 by their
/// peer names.
#[test]
fn the_lost_members_claims_go_before_the_survivor_starts_forced() {
    let (ns, sts) = ("om-example", "example-om");
    let claims = [
        "data-example-om-0",
        "data-example-om-1",
        "data-example-om-2",
        "archive-example-om-0",
        "archive-example-om-1",
        "data-example-om-s3-0",
        "data-other-0",
    ];
    let (out, calls) = run(&["--yes", ns, sts, "1"], sts, &claims);
    assert!(out.status.success(), "{}", text(&out));
    for c in &calls {
        assert!(c.starts_with(&format!("-n {ns} ")), "{c}: not in {ns}");
    }
    let suspend = position(
        &calls,
        &["patch cronjob example-om-backup", r#""suspend":true"#],
    );
    let down = position(&calls, &["scale statefulset example-om", "--replicas=0"]);
    let gone = down
        + 1
        + calls[down + 1..]
            .iter()
            .position(|c| c.contains(" get pods "))
            .expect("the script waits for the pods to go");
    let delete0 = position(&calls, &["delete pvc data-example-om-0"]);
    let delete2 = position(&calls, &["delete pvc data-example-om-2"]);
    let flag = position(
        &calls,
        &[
            "patch configmap example-om-config",
            r#""force_new_cluster":"example-om-1""#,
        ],
    );
    let up = position(&calls, &["scale statefulset example-om", "--replicas=2"]);
    let ready = position(&calls, &["wait", "condition=Ready", "pod/example-om-1"]);
    let unflag = position(
        &calls,
        &[
            "patch configmap example-om-config",
            r#""force_new_cluster":"""#,
        ],
    );
    let back = position(&calls, &["scale statefulset example-om", "--replicas=3"]);
    assert!(suspend < down && down < gone, "{calls:#?}");
    assert!(gone < delete0 && gone < delete2, "{calls:#?}");
    assert!(delete0 < flag && delete2 < flag, "{calls:#?}");
    assert!(
        flag < up && up < ready && ready < unflag && unflag < back,
        "{calls:#?}"
    );
    // Deleted: the lost members' data claims, nothing else.
    let deleted: Vec<&String> = calls.iter().filter(|c| c.contains(" delete ")).collect();
    assert_eq!(deleted.len(), 2, "{deleted:#?}");
    for c in &calls {
        for kept in [
            "data-example-om-1",
            "archive-",
            "data-example-om-s3-0",
            "data-other-0",
        ] {
            assert!(
                !(c.contains(" delete ") && c.contains(kept)),
                "{c}: {kept} is kept"
            );
        }
    }
    // Scaled to 2, not 1: a StatefulSet starts ordinals from 0.
    assert!(
        !calls.iter().any(|c| c.contains("--replicas=1")),
        "{calls:#?}"
    );
    let printed = text(&out);
    for (id, ordinal) in [(1, 0), (3, 2)] {
        let host = format!("example-om-{ordinal}.example-om-peers.{ns}.svc.k8s.example.internal");
        let add =
            format!("omctl cluster add-node {id} --raft-addr {host}:9872 --grpc-addr {host}:9862");
        assert!(printed.contains(&add), "{printed}");
    }
    assert!(!printed.contains("add-node 2 "), "{printed}");
    assert!(
        printed.contains(r#""suspend":false"#),
        "how to resume: {printed}"
    );
}

/// Survivor 0: the StatefulSet runs it alone (1 replica), then 3.
#[test]
fn survivor_zero_starts_alone() {
    let claims = ["data-om-0", "data-om-1", "data-om-2"];
    let (out, calls) = run(&["--yes", "om", "om", "0"], "om", &claims);
    assert!(out.status.success(), "{}", text(&out));
    let scales: Vec<&String> = calls.iter().filter(|c| c.contains(" scale ")).collect();
    let replicas: Vec<&str> = scales
        .iter()
        .map(|c| c.rsplit("--replicas=").next().unwrap())
        .collect();
    assert_eq!(replicas, vec!["0", "1", "3"], "{scales:#?}");
    assert!(!calls.iter().any(|c| c.contains("delete pvc data-om-0")));
    position(&calls, &["delete pvc data-om-1"]);
    position(&calls, &["delete pvc data-om-2"]);
}

/// --dry-run reads the cluster and prints every command that would change
/// it, deletions included, and runs none.
#[test]
fn a_dry_run_changes_nothing() {
    let claims = ["data-om-0", "data-om-1", "data-om-2"];
    let (out, calls) = run(&["--dry-run", "om", "om", "2"], "om", &claims);
    assert!(out.status.success(), "{}", text(&out));
    assert!(changes(&calls).is_empty(), "{calls:#?}");
    assert!(
        !calls.iter().any(|c| c.contains(" wait ")),
        "a dry run waits for nothing"
    );
    let printed = text(&out);
    for line in [
        "+ kubectl -n om patch cronjob om-backup",
        "+ kubectl -n om scale statefulset om --replicas=0",
        "+ kubectl -n om delete pvc data-om-0",
        "+ kubectl -n om delete pvc data-om-1",
        "+ kubectl -n om scale statefulset om --replicas=3",
    ] {
        assert!(printed.contains(line), "{line} in {printed}");
    }
    assert!(!printed.contains("delete pvc data-om-2"), "{printed}");
}

/// Without --yes and nobody to confirm, or with a survivor that has no
/// claim, or no ordinal: nothing changes.
#[test]
fn nothing_changes_unless_confirmed_and_sound() {
    let claims = ["data-om-0", "data-om-1", "data-om-2"];
    for args in [
        vec!["om", "om", "1"],
        vec!["--yes", "--replicas", "9", "om", "om", "7"],
        vec!["--yes", "om", "om", "7"],
        vec!["--yes", "om", "om", "om-1"],
        vec!["--yes", "om", "om"],
    ] {
        let (out, calls) = run(&args, "om", &claims);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(changes(&calls).is_empty(), "{args:?}: {calls:#?}");
    }
}

/// The flag as the members read it: the om container's script, run with
/// the ConfigMap's force_new_cluster naming pod 1 and a stand-in `om` that
/// prints OM_FORCE_NEW_CLUSTER, exports it in pod 1 only; the key is the
/// one the script patches; the container reads it from the ConfigMap.
#[test]
fn the_flag_reaches_only_the_pod_it_names() {
    use std::os::unix::fs::PermissionsExt;
    let m = render(&kube_dir());
    let c = m.om();
    let (config_name, data) = m.config();
    assert!(
        std::fs::read_to_string(script())
            .unwrap()
            .contains(r#"{\"data\":{\"force_new_cluster\":"#),
        "the script sets the key force_new_cluster"
    );
    assert!(data.contains_key("force_new_cluster"));
    assert!(
        c.env.iter().flatten().any(|v| v
            .value_from
            .as_ref()
            .and_then(|f| f.config_map_key_ref.as_ref())
            .is_some_and(|k| k.key == "force_new_cluster" && k.name == config_name)),
        "om's container reads force_new_cluster"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("members.sh"), &data["members.sh"]).unwrap();
    let om = dir.path().join("om");
    std::fs::write(
        &om,
        "#!/bin/sh\nprintf '%s' \"${OM_FORCE_NEW_CLUSTER:-unset}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&om, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script_of(c).replace("/etc/om/config", config.to_str().unwrap());
    let mut forced = data.clone();
    let survivor = format!("{}-1", m.sts_name());
    forced.insert("force_new_cluster".into(), survivor.clone());
    let started = |pod: &str, data: &std::collections::BTreeMap<String, String>| -> String {
        let env = container_env(c, pod, &m.ns(), (config_name, data));
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .env_clear()
            .envs(env)
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(started(&survivor, &forced), "true");
    for i in [0, 2] {
        assert_eq!(started(&format!("{}-{i}", m.sts_name()), &forced), "unset");
    }
    assert_eq!(started(&survivor, data), "unset");
}
