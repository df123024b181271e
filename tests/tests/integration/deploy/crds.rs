//! The custom resources the manifests use (cert-manager's, approver-policy's
//! and the Prometheus operator's), parsed strictly as their CRDs define the
//! fields used here.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;

// The custom resources the manifests use, as their CRDs define the fields
// used here; anything else is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Custom<S> {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ServiceMonitorSpec {
    pub(crate) job_label: Option<String>,
    pub(crate) selector: LabelSelector,
    pub(crate) endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Endpoint {
    pub(crate) port: String,
    pub(crate) path: String,
    pub(crate) interval: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrometheusRuleSpec {
    pub(crate) groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleGroup {
    #[allow(dead_code)]
    pub(crate) name: String,
    pub(crate) rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    pub(crate) alert: String,
    pub(crate) expr: String,
    #[serde(rename = "for")]
    #[allow(dead_code)]
    pub(crate) for_: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct IssuerSpec {
    pub(crate) self_signed: Option<BTreeMap<String, String>>,
    pub(crate) ca: Option<CaIssuer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CaIssuer {
    #[allow(dead_code)]
    pub(crate) secret_name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct CertificateSpec {
    #[serde(rename = "isCA")]
    pub(crate) is_ca: Option<bool>,
    pub(crate) common_name: Option<String>,
    pub(crate) secret_name: String,
    pub(crate) duration: Option<String>,
    pub(crate) renew_before: Option<String>,
    pub(crate) dns_names: Option<Vec<String>>,
    pub(crate) uris: Option<Vec<String>>,
    pub(crate) usages: Option<Vec<String>>,
    pub(crate) private_key: Option<PrivateKey>,
    pub(crate) issuer_ref: IssuerRef,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct PrivateKey {
    pub(crate) algorithm: String,
    pub(crate) size: u32,
    pub(crate) rotation_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IssuerRef {
    pub(crate) name: String,
    pub(crate) kind: String,
}

// approver-policy's CertificateRequestPolicy (policy.cert-manager.io/v1alpha1),
// the fields components/approver-policy uses.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct PolicySpec {
    pub(crate) allowed: Option<PolicyAllowed>,
    pub(crate) constraints: Option<PolicyConstraints>,
    pub(crate) selector: PolicySelector,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct PolicyAllowed {
    pub(crate) common_name: Option<AllowedString>,
    pub(crate) dns_names: Option<AllowedStrings>,
    pub(crate) uris: Option<AllowedStrings>,
    #[serde(rename = "isCA")]
    pub(crate) is_ca: Option<bool>,
    pub(crate) usages: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct AllowedString {
    pub(crate) value: Option<String>,
    pub(crate) required: Option<bool>,
    pub(crate) validations: Option<Vec<ValidationRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct AllowedStrings {
    pub(crate) values: Option<Vec<String>>,
    pub(crate) required: Option<bool>,
    pub(crate) validations: Option<Vec<ValidationRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct ValidationRule {
    pub(crate) rule: String,
    pub(crate) message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct PolicyConstraints {
    pub(crate) min_duration: Option<String>,
    pub(crate) max_duration: Option<String>,
    pub(crate) private_key: Option<KeyConstraints>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct KeyConstraints {
    pub(crate) algorithm: Option<String>,
    pub(crate) min_size: Option<u32>,
    pub(crate) max_size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct PolicySelector {
    pub(crate) issuer_ref: Option<PolicyIssuerRef>,
    pub(crate) namespace: Option<PolicyNamespace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct PolicyIssuerRef {
    pub(crate) name: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct PolicyNamespace {
    pub(crate) match_names: Option<Vec<String>>,
}
