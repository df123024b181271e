//! The fault suite: real processes and in-process nodes killed, paused,
//! partitioned and restarted under load, checked for lost writes, stale
//! reads, diverged replicas and non-linearizable histories. One binary,
//! one module per fault family; run one with a name filter, e.g.
//! `cargo test --release --workspace --test faults -- partitions::`.

mod corruption;
mod disk_full;
mod divergence;
mod durability;
mod fault_schedules;
mod linearizable;
mod partitions;
mod power_cut;
mod power_cut_aimed;
mod rejoin;
mod stale_read;
mod storage_errors;
