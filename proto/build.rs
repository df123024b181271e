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
    op_names(&out)
}

/// `Command::op_name`, derived from the `oneof op` of `store.proto`, so the
/// schema is the one list of replicated operations' names (each variant is
/// named after its message).
fn op_names(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let proto = std::fs::read_to_string("proto/om/v1/store.proto")?;
    let body = proto
        .split_once("oneof op {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .ok_or("store.proto has no `oneof op`")?
        .0;
    let mut arms = String::new();
    for line in body.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        let message = line.split_whitespace().next().ok_or("empty oneof line")?;
        arms.push_str(&format!(
            "            Some(Op::{message}(_)) => \"{message}\",\n"
        ));
    }
    let code = format!(
        "impl store::Command {{\n    /// The operation's name, e.g. `PutKey`.\n    pub fn op_name(&self) -> &'static str {{\n        use store::command::Op;\n        match &self.op {{\n{arms}            None => \"Empty\",\n        }}\n    }}\n}}\n"
    );
    std::fs::write(out.join("op_names.rs"), code)?;
    Ok(())
}
