//! om: the replicated object-metadata manager server.
//!
//! Owns the metadata tables and their key layouts (`store`), the deterministic
//! state machine (`apply`), the request layer (`service`), the public gRPC
//! edge (`grpc`), HTTP probes and metrics (`http`, `metrics`) and the wiring
//! of a node (`server`). It must never read a clock or randomness in `apply`,
//! and only `grpc` turns errors into `tonic::Status`.

pub mod apply;
pub mod audit;
pub mod authz;
pub mod backup;
pub mod cluster_id;
pub mod config;
pub mod descriptors;
pub mod divergence;
pub mod error;
pub mod fault;
pub mod fs;
pub mod grpc;
pub mod http;
pub mod incarnation;
pub mod lifecycle;
pub mod limits;
pub mod listing;
pub mod memory;
pub mod metrics;
pub use om_tls::net;
pub mod peers;
pub mod restore;
pub mod rules;
pub mod secrets;
pub mod server;
pub mod service;
pub mod store;
pub mod tasks;
pub mod validate;
pub mod verify;
