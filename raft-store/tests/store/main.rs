//! The storage suite: the log and state machine against openraft's storage
//! test suite, snapshots built, streamed, verified and installed, and random
//! or mutated snapshot files refused without harm. One binary, one module per
//! subject.

mod common;
mod snapshot_fuzz;
mod snapshots;
mod storage;
