//! The alert rules fire and clear in promtool.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::render::*;

/// The Prometheus rule file the alert tests name (`rule_files:`), written
/// next to them: the PrometheusRule's `spec` (its `groups:`).
pub(crate) const PROMTOOL_RULES: &str = "om-rules.yaml";

/// Runs promtool with `args` in `dir` and returns its output; panics with
/// that output unless it succeeds, and when promtool is missing.
pub(crate) fn promtool<I, S>(dir: &Path, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool (Debian's prometheus package; scripts/setup.sh installs it): {e}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool failed ({}):\n{text}",
        out.status
    );
    text
}

/// prometheusrule.yaml's rules, taken out of the custom resource, pass
/// `promtool check rules`, and `promtool test rules` fires and clears every
/// alert on the series of `alert-tests/`. Without promtool this fails:
/// `make test` runs scripts/setup.sh, which installs it.
#[test]
pub(crate) fn alerts_fire_and_clear_in_promtool() {
    let dir = kube_dir();
    let rule = documents(&dir.join("prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .expect("prometheusrule.yaml holds a PrometheusRule");
    let spec = &rule["spec"];
    let alerts: BTreeSet<String> = spec["groups"]
        .as_sequence()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules of a group").iter())
        .map(|r| r["alert"].as_str().expect("an alert").to_string())
        .collect();
    assert!(!alerts.is_empty());

    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join(PROMTOOL_RULES),
        serde_norway::to_string(spec).unwrap(),
    )
    .unwrap();
    let mut tests: Vec<std::ffi::OsString> = Vec::new();
    let (mut fired, mut cleared) = (BTreeSet::new(), BTreeSet::new());
    for e in std::fs::read_dir(dir.join("alert-tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let docs = documents(&p);
        let doc = &docs[0];
        let files: Vec<&str> = doc["rule_files"]
            .as_sequence()
            .expect("rule_files")
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(files, [PROMTOOL_RULES], "{}", p.display());
        for t in doc["tests"].as_sequence().expect("tests") {
            for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = a["alertname"].as_str().expect("alertname").to_string();
                // No (or empty) exp_alerts: the alert must not be firing.
                if a["exp_alerts"].as_sequence().is_some_and(|s| !s.is_empty()) {
                    fired.insert(name);
                } else {
                    cleared.insert(name);
                }
            }
        }
        let name = p.file_name().unwrap().to_os_string();
        std::fs::copy(&p, tmp.path().join(&name)).unwrap();
        tests.push(name);
    }
    tests.sort();
    assert!(!tests.is_empty(), "no promtool tests in alert-tests/");
    let untested: Vec<&String> = alerts
        .iter()
        .filter(|a| !(fired.contains(*a) && cleared.contains(*a)))
        .collect();
    assert!(
        untested.is_empty(),
        "alerts alert-tests/ does not both fire and clear: {untested:?}"
    );
    let unknown: Vec<&String> = fired
        .union(&cleared)
        .filter(|a| !alerts.contains(*a))
        .collect();
    assert!(
        unknown.is_empty(),
        "alert-tests/ tests no such alerts: {unknown:?}"
    );

    let checked = promtool(tmp.path(), ["check", "rules", PROMTOOL_RULES]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{checked}"
    );
    let mut args: Vec<std::ffi::OsString> = vec!["test".into(), "rules".into()];
    args.extend(tests.iter().cloned());
    let tested = promtool(tmp.path(), args);
    assert_eq!(tested.matches("SUCCESS").count(), tests.len(), "{tested}");
}
