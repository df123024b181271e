//! `scripts/setup.sh` decides what a fresh machine lacks. Its libclang detection must
//! accept exactly the files bindgen's loader opens and nothing that merely looks alike
//! (Debian images ship `libclang-cpp.so.N` without `libclang`). Each case builds a fake
//! file layout and asks the script what it would install.

use std::process::Command;

fn script() -> std::path::PathBuf {
    om_tests::repo_root().join("scripts/setup.sh")
}

/// What setup would install on a machine whose files are `files` (paths under `/`).
fn needs(files: &[&str], libclang_path: Option<&str>) -> String {
    let root = tempfile::tempdir().unwrap();
    for f in files {
        let p = root.path().join(f.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"").unwrap();
        if f.contains("/bin/") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg("--print-needs")
        .env("OM_SETUP_ROOT", root.path())
        .env_remove("LIBCLANG_PATH");
    if let Some(p) = libclang_path {
        cmd.env("LIBCLANG_PATH", root.path().join(p.trim_start_matches('/')));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

const TOOLS: [&str; 2] = ["/usr/bin/c++", "/usr/bin/make"];

fn with_tools(extra: &[&'static str]) -> Vec<&'static str> {
    TOOLS.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn look_alikes_are_not_libclang() {
    // The fresh image: clang's C++ library and static archives, no libclang.
    let fresh = with_tools(&[
        "/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14",
        "/usr/lib/llvm-14/lib/libclang-cpp.so.14",
        "/usr/lib/llvm-14/lib/libclangBasic.a",
        "/usr/lib/x86_64-linux-gnu/libclang-cpp.so",
    ]);
    assert_eq!(needs(&fresh, None), "libclang-dev");
    assert_eq!(needs(&with_tools(&[]), None), "libclang-dev");
}

#[test]
fn every_name_bindgen_loads_counts() {
    for lib in [
        "/usr/lib/llvm-14/lib/libclang.so",
        "/usr/lib/llvm-16/lib/libclang-16.so",
        "/usr/lib/x86_64-linux-gnu/libclang-14.so.1",
        "/usr/lib/x86_64-linux-gnu/libclang.so.1",
        "/usr/lib/aarch64-linux-gnu/libclang-15.0.7.so",
        "/usr/lib64/libclang.so",
        "/usr/local/lib/libclang.so.18.1",
    ] {
        assert_eq!(needs(&with_tools(&[lib]), None), "", "{lib}");
    }
}

#[test]
fn libclang_path_is_searched() {
    let files = with_tools(&["/opt/llvm/lib/libclang.so"]);
    assert_eq!(needs(&files, None), "libclang-dev");
    assert_eq!(needs(&files, Some("/opt/llvm/lib")), "");
}

#[test]
fn missing_compiler_and_make_are_installed() {
    assert_eq!(
        needs(&["/usr/lib/llvm-14/lib/libclang.so"], None),
        "g++ make"
    );
    assert_eq!(needs(&[], None), "g++ make libclang-dev");
}
