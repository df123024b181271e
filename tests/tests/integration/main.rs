//! The integration suite: one test binary, one module per subject, so the
//! workspace links RocksDB and instantiates the client, server and harness
//! code once instead of once per file. Tests run concurrently (libtest's
//! threads); each starts its own nodes on its own ports and directories.
//!
//! Run one subject with a name filter, e.g.
//! `cargo test --release --workspace --test integration -- versioning::`.
//! The fault schedules, partitions and other kill/pause tests live in the
//! `faults` binary.

mod acl;
mod api;
mod apply_runs;
mod backup;
mod bulk;
mod cli;
mod clock;
mod cluster;
mod cluster_process;
mod deploy;
mod differential;
mod disk;
mod files;
mod forwarding;
mod fuzz;
mod lifecycle;
mod lifecycle_scan;
mod limits;
mod listing;
mod objects;
mod observability;
mod overload;
mod pages;
mod quota;
mod raft_hardening;
mod retry_cache;
mod s3_gateway;
mod setup;
mod snapshots;
mod tagging;
mod tidy;
mod tls;
mod upgrade;
mod versioning;
