//! Generates the gRPC and message code from `proto/` at build time, with the
//! vendored `protoc`, so a fresh machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let files = [
        "proto/om/v1/om.proto",
        "proto/om/v1/store.proto",
        "proto/om/raft/v1/raft.proto",
        "proto/om/raft/v1/peer.proto",
        "proto/etcd/kv.proto",
    ];
    // Every protobuf map is a BTreeMap, so a message always encodes its map
    // entries in key order: replicas store identical bytes for the same state
    // (a HashMap's order depends on each process's random hasher).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .btree_map(".")
        // A log entry's command as `Bytes`: shared with the decoded command,
        // not copied, when a leader sends it to each follower.
        .bytes(".om.raft.v1.Entry.normal")
        // Messages that carry an S3 secret key print it redacted
        // (`om_proto::redacted`), so no log line can show one.
        .skip_debug([
            ".om.store.v1.S3SecretRecord",
            ".om.store.v1.CreateS3Secret",
            ".om.v1.CreateS3SecretResponse",
            ".om.v1.GetS3SecretResponse",
        ])
        .file_descriptor_set_path(out.join("om_descriptor.bin"))
        .build_client(true)
        .build_server(true)
        .compile_protos(&files, &["proto"])?;
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    Ok(())
}
