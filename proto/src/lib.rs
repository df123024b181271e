//! Protobuf messages and gRPC services of om, generated at build time.
//!
//! `v1` is the public API; `store` holds the replicated command and stored
//! record formats; `raft` holds the internal Raft transport and log formats.

#![allow(clippy::all, clippy::pedantic)]

/// The generated modules nest as their protobuf packages do, so messages of
/// one package can name another's (`om.store.v1` stores `om.v1` lifecycle
/// rules as they were validated; `om.raft.v1` forwards `om.store.v1`
/// commands).
mod packages {
    pub mod om {
        pub mod v1 {
            tonic::include_proto!("om.v1");
        }
        pub mod store {
            pub mod v1 {
                tonic::include_proto!("om.store.v1");
            }
        }
        pub mod raft {
            pub mod v1 {
                tonic::include_proto!("om.raft.v1");
            }
        }
    }
}

pub use packages::om::raft::v1 as raft;
pub use packages::om::store::v1 as store;
pub use packages::om::v1;

/// The encoded `FileDescriptorSet` of every proto above, for gRPC server
/// reflection (`grpcurl list`, `grpcurl describe`).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/om_descriptor.bin"));

/// A wire-compatible subset of etcd's KV API, for side-by-side benchmarks.
pub mod etcd {
    tonic::include_proto!("etcdserverpb");
}

/// Names the operation only: user keys never reach logs at info level.
impl std::fmt::Display for store::Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.batch.is_empty() {
            write!(f, "{}", self.op_name())
        } else {
            write!(f, "Batch({})", self.batch.len())
        }
    }
}

// `Command::op_name`, generated from `store.proto`'s `oneof op` (`build.rs`).
include!(concat!(env!("OUT_DIR"), "/op_names.rs"));

/// Debug output of the messages that carry an S3 secret key: every field
/// but the secret, which shows as `<redacted>` (see `build.rs`).
mod redacted {
    use std::fmt;

    const HIDDEN: &str = "<redacted>";

    impl fmt::Debug for super::store::S3SecretRecord {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("S3SecretRecord")
                .field("format", &self.format)
                .field("access_key", &self.access_key)
                .field("secret_key", &HIDDEN)
                .field("user", &self.user)
                .field("groups", &self.groups)
                .field("created_ms", &self.created_ms)
                .finish()
        }
    }

    impl fmt::Debug for super::store::CreateS3Secret {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("CreateS3Secret")
                .field("access_key", &self.access_key)
                .field("secret_key", &HIDDEN)
                .field("user", &self.user)
                .field("groups", &self.groups)
                .finish()
        }
    }

    impl fmt::Debug for super::v1::CreateS3SecretResponse {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("CreateS3SecretResponse")
                .field("credential", &self.credential)
                .field("secret_key", &HIDDEN)
                .finish()
        }
    }

    impl fmt::Debug for super::v1::GetS3SecretResponse {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("GetS3SecretResponse")
                .field("credential", &self.credential)
                .field("secret_key", &HIDDEN)
                .finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    /// The same record encodes to the same bytes whatever order its map was
    /// filled in, in any process: replicas must store identical bytes.
    #[test]
    fn maps_encode_in_key_order() {
        let pairs: Vec<(String, String)> = (0..32)
            .map(|i| (format!("name{i:02}"), format!("value{i}")))
            .collect();
        let forward = super::store::KeyRecord {
            metadata: pairs.iter().cloned().collect(),
            ..Default::default()
        };
        let backward = super::store::KeyRecord {
            metadata: pairs.iter().rev().cloned().collect(),
            ..Default::default()
        };
        let a = forward.encode_to_vec();
        assert_eq!(a, backward.encode_to_vec());
        let again = super::store::KeyRecord::decode(a.as_slice()).unwrap();
        assert_eq!(again.encode_to_vec(), a);
        // Entries appear on the wire sorted by key.
        let pos: Vec<usize> = pairs
            .iter()
            .map(|(k, _)| a.windows(k.len()).position(|w| w == k.as_bytes()).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn secrets_print_redacted() {
        let r = super::store::S3SecretRecord {
            access_key: "OMEXAMPLE".into(),
            secret_key: "very-secret-key".into(),
            user: "alice".into(),
            ..Default::default()
        };
        let shown = format!("{r:?}");
        assert!(shown.contains("OMEXAMPLE") && shown.contains("alice"));
        assert!(!shown.contains("very-secret-key"));
        let c = super::store::Command {
            op: Some(super::store::command::Op::CreateS3Secret(
                super::store::CreateS3Secret {
                    secret_key: "very-secret-key".into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("very-secret-key"));
        let g = super::v1::GetS3SecretResponse {
            secret_key: "very-secret-key".into(),
            ..Default::default()
        };
        assert!(!format!("{g:?}").contains("very-secret-key"));
    }
}
