//! `deploy/`: the Kubernetes manifests as `kubectl kustomize` renders them
//! (the base, `deploy/overlays/example` with another namespace, a name
//! prefix, five members and another cluster domain, and the plaintext
//! `deploy/overlays/dev`), every object parsed strictly against
//! Kubernetes' types (unknown fields refused) and their cross-references
//! checked in each rendering; the StatefulSet run as processes (its init
//! container, command, environment and ConfigMap) through a rolling update
//! under write load, scaling, and a restore from the backup CronJob's
//! backup; and gRPC health and reflection answered to real clients.

mod alerts;
mod checks;
mod gateway;
mod render;
mod rendering;
mod statefulset;
