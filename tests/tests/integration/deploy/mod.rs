//! `deploy/`: the Kubernetes manifests as `kubectl kustomize` renders them
//! (the base, `deploy/overlays/example` with another namespace, a name
//! prefix, five members and another cluster domain, the plaintext
//! `deploy/overlays/dev`, the optional components, and two prefixed
//! instances in one namespace), every object parsed strictly against
//! Kubernetes' types (unknown fields refused) and their cross-references
//! checked in each rendering; the StatefulSet run as processes (its init
//! container, command, environment and ConfigMap) through a rolling update
//! under write load, scaling, and a restore from the backup CronJob's
//! backup; `deploy/scripts/force-new-cluster.sh` against a stand-in
//! kubectl; gRPC health and reflection answered to real clients; and the
//! alert rules and dashboard evaluated by a real Prometheus scraping real
//! members.

mod alerts;
mod backup_tools;
mod certificates;
mod checks;
mod crds;
mod force_new_cluster;
mod gateway;
mod helpers;
mod instances;
mod live;
mod processes;
mod render;
mod rendering;
mod statefulset;
