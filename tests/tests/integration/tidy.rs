//! Structure checks over the workspace's own sources (ARCHITECTURE.md,
//! "Code map"): no Rust source file past `MAX_LINES` lines of code outside
//! tests, and in every crate the modules import only from the layers below
//! their own, with no cycle among the modules of the crate root or among
//! the submodules of any module, so the layering cannot erode one import at
//! a time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest a source file may be, test items not counted.
const MAX_LINES: usize = 800;

/// Each crate's top-level modules by layer, lowest first. A module may
/// import only from rows below its own; a new module must be placed here.
/// Every crate of `CRATES` has a table (a crate of one file has no rows).
const LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "om",
        &[
            &["fault"],
            &["error", "rules", "limits"],
            &["validate"],
            &["store"],
            &[
                "fs",
                "cluster_id",
                "metrics",
                "backup",
                "audit",
                "peers",
                "descriptors",
                "memory",
                "secrets",
            ],
            &["authz", "listing", "lifecycle", "divergence", "incarnation"],
            &["apply", "verify"],
            &["service"],
            &["tasks"],
            &["grpc", "http"],
            &["config"],
            &["restore"],
            &["server"],
        ],
    ),
    (
        "raft-store",
        &[
            &[
                "keys", "codec", "metrics", "memory", "command", "hot", "wal",
            ],
            &["overlay", "pins", "disk"],
            &["applied", "transient", "archive"],
            &["digest", "snapshot", "log_store"],
            &["snapshot_store"],
            &["state_machine", "backup", "network"],
        ],
    ),
    (
        "client",
        &[&[
            "backup",
            "cluster",
            "keys",
            "namespace",
            "snapshots",
            "versioning",
        ]],
    ),
    (
        "gateway",
        &[
            &["errors", "blocks", "host", "logging", "uri"],
            &["auth", "config", "reclaim"],
            &["scope", "post"],
            &["length", "form"],
            &["front"],
            &["s3"],
            &["http"],
        ],
    ),
    (
        "cli",
        &[
            &[
                "versions",
                "objects",
                "backup_copy",
                "tagging",
                "lifecycle",
                "quota",
            ],
            &[
                "output",
                "files",
                "backup_cmd",
                "acl",
                "bench",
                "bench_mix",
                "cluster",
                "keys",
                "namespace",
                "snapshots",
                "token",
            ],
            &["s3"],
        ],
    ),
    ("proto", &[]),
    ("tls", &[&["names", "net"]]),
    ("backup-format", &[&["keys"]]),
];

/// Crates whose sources the checks cover (the `tests` crate is tests).
const CRATES: &[&str] = &[
    "proto",
    "tls",
    "raft-store",
    "backup-format",
    "om",
    "cli",
    "client",
    "gateway",
];

/// The workspace this test runs in. Cargo sets `CARGO_MANIFEST_DIR` when it
/// runs the test, so a binary built in another clone that shares the target
/// directory still reads this clone's sources.
fn workspace() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Test-only files: `tests.rs`, `*_tests.rs`, anything under a `tests`
/// directory.
fn is_test_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || p.components().any(|c| c.as_os_str() == "tests")
}

/// The lines of `src` outside `#[cfg(test)]` items, with `//` comments cut.
fn code_lines(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = src.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            // Skip the item: one line (`mod tests;`) or a braced block.
            let mut depth = 0i64;
            let mut opened = false;
            for l in lines.by_ref() {
                for c in l.chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push(code.to_string());
    }
    out
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let root = workspace();
    let mut long = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        for f in files.iter().filter(|f| !is_test_file(f)) {
            let src = std::fs::read_to_string(f).unwrap();
            let n = code_lines(&src).len();
            if n > MAX_LINES {
                long.push(format!(
                    "{} has {n} lines outside tests",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files past {MAX_LINES} lines (split them by subject):\n{}",
        long.join("\n")
    );
}

/// A crate's modules by path ("apply::versions"; "" is the crate root)
/// and the code of each. A crate with a library has its `main.rs` left
/// out; a binary-only crate has `main.rs` as its root.
fn crate_modules(krate: &str) -> BTreeMap<String, String> {
    let src = workspace().join(krate).join("src");
    let has_lib = src.join("lib.rs").exists();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        if (parts == ["main"] && has_lib) || parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        if is_test_file(&f) {
            continue;
        }
        let path = if parts == ["lib"] || parts == ["main"] {
            String::new()
        } else {
            parts.join("::")
        };
        let code = code_lines(&std::fs::read_to_string(&f).unwrap()).join("\n");
        out.insert(path, code);
    }
    out
}

/// Every path a module names through `crate::` or `super::`, made absolute
/// ("apply::versions::version_id"), groups (`{a, b::c}`) expanded.
fn named_paths(module: &str, code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &code[i..];
        let preceded_by_ident =
            i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let start = if preceded_by_ident {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("super::") {
            let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
            let mut n = 0;
            while code[i + n..].starts_with("super::") {
                base.pop();
                n += "super::".len();
            }
            Some((base.iter().map(|s| s.to_string()).collect(), n))
        } else {
            None
        };
        match start {
            Some((base, skip)) => {
                i += skip;
                i += parse_tree(&code[i..], &base, &mut out);
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// Parses a use tree (`a::b`, `a::{b, c::d}`, `*`) at the start of `s`,
/// pushing each full path under `base`; returns the bytes read.
fn parse_tree(s: &str, base: &[String], out: &mut Vec<String>) -> usize {
    let mut path = base.to_vec();
    let mut i = 0;
    loop {
        let ident: String = s[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !ident.is_empty() {
            i += ident.len();
            path.push(ident);
            if s[i..].starts_with("::") {
                i += 2;
                continue;
            }
            out.push(path.join("::"));
            return i;
        }
        if s[i..].starts_with('{') {
            i += 1;
            loop {
                let ws = s[i..].len() - s[i..].trim_start().len();
                i += ws;
                if s[i..].starts_with('}') {
                    return i + 1;
                }
                if s[i..].starts_with(',') {
                    i += 1;
                    continue;
                }
                let before = i;
                i += parse_tree(&s[i..], &path, out);
                // Skip `as name` and anything else up to the separator.
                while i < s.len() && !s[i..].starts_with(',') && !s[i..].starts_with('}') {
                    i += s[i..].chars().next().map_or(1, char::len_utf8);
                }
                if i == before {
                    return i;
                }
            }
        }
        out.push(path.join("::"));
        return i;
    }
}

/// The module a path names: its longest prefix that is a module.
fn module_of(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|p| modules.contains(p))
}

fn is_within(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

/// Edges between a crate's modules (a module and its ancestors or
/// descendants do not count).
fn crate_edges(krate: &str) -> BTreeSet<(String, String)> {
    let modules = crate_modules(krate);
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut edges = BTreeSet::new();
    for (m, code) in &modules {
        for p in named_paths(m, code) {
            if let Some(t) = module_of(&p, &names)
                && !t.is_empty()
                && !is_within(m, &t)
            {
                edges.insert((m.clone(), t));
            }
        }
    }
    edges
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

#[test]
fn modules_import_only_from_lower_layers() {
    let mut wrong = Vec::new();
    for krate in CRATES {
        let Some((_, layers)) = LAYERS.iter().find(|(k, _)| k == krate) else {
            wrong.push(format!("{krate} has no LAYERS table"));
            continue;
        };
        wrong.extend(layering_errors(krate, layers, &crate_edges(krate)));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What breaks `layers` in `krate`: modules in no layer, imports that are
/// not strictly downward.
fn layering_errors(
    krate: &str,
    layers: &[&[&str]],
    edges: &BTreeSet<(String, String)>,
) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(r, row)| row.iter().map(move |m| (*m, r)))
        .collect();
    let mut wrong = Vec::new();
    let tops: BTreeSet<String> = crate_modules(krate)
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| top(m).to_string())
        .collect();
    for m in &tops {
        if !rank.contains_key(m.as_str()) {
            wrong.push(format!("{krate}: {m} is in no layer: add it to LAYERS"));
        }
    }
    for (from, to) in edges {
        let (a, b) = (top(from), top(to));
        if a == b {
            continue;
        }
        if let (Some(ra), Some(rb)) = (rank.get(a), rank.get(b))
            && ra <= rb
        {
            wrong.push(format!(
                "{krate}: {from} imports {to}, which is not below it"
            ));
        }
    }
    wrong
}

#[test]
fn modules_form_no_cycle() {
    let mut cycles = Vec::new();
    for krate in CRATES {
        cycles.extend(
            cycles_in(&crate_edges(krate))
                .into_iter()
                .map(|c| format!("{krate}: {c}")),
        );
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The cycles among the children of each module, the crate root's
/// (top-level modules) included: each edge counts between the two children
/// of the deepest module both endpoints are within.
fn cycles_in(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    let mut by_parent: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in edges {
        let (f, t): (Vec<&str>, Vec<&str>) = (from.split("::").collect(), to.split("::").collect());
        let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
        if common >= f.len() || common >= t.len() {
            continue;
        }
        let parent = f[..common].join("::");
        by_parent
            .entry(parent)
            .or_default()
            .entry(f[common].to_string())
            .or_default()
            .insert(t[common].to_string());
    }
    by_parent
        .iter()
        .filter_map(|(parent, graph)| {
            let cycle = find_cycle(graph)?;
            let within = if parent.is_empty() {
                "the crate root"
            } else {
                parent
            };
            Some(format!("in {within}: {}", cycle.join(" -> ")))
        })
        .collect()
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == n) {
            let mut c = stack[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

/// The checks themselves find what they are meant to.
#[test]
fn the_checks_see_imports_and_cycles() {
    let paths = named_paths(
        "apply::limits",
        "use super::{Ctx, versions::{a, b as c}};\nlet x = crate::store::keys::f();",
    );
    assert_eq!(
        paths,
        [
            "apply::Ctx",
            "apply::versions::a",
            "apply::versions::b",
            "store::keys::f"
        ]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into();
    assert!(find_cycle(&graph).is_some());
    // Between top-level modules and between submodules of one module.
    let edges: BTreeSet<(String, String)> = [
        ("digest", "snapshot_store::read"),
        ("snapshot_store::install", "digest"),
        ("s3::copy", "s3::data"),
        ("s3::data::x", "s3::copy"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let found = cycles_in(&edges);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("in the crate root: "), "{found:?}");
    assert!(found[1].starts_with("in s3: "), "{found:?}");
    let wrong = layering_errors(
        "om",
        &[&["error"], &["validate"]],
        &BTreeSet::from([("error".to_string(), "validate".to_string())]),
    );
    assert!(
        wrong.iter().any(|w| w.contains("error imports validate")),
        "{wrong:?}"
    );
    let code =
        code_lines("fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\nfn b() {} // c");
    assert_eq!(code, ["fn a() {}", "fn b() {} "]);
}

/// Apply reads the state only through its run's view (ARCHITECTURE.md,
/// "Applying in runs"): no apply source outside tests names the database's
/// own read calls or iterator, or reaches the database under the view for
/// anything but a column family handle.
#[test]
fn apply_reads_only_through_its_view() {
    let om = workspace().join("om/src");
    let mut files = vec![om.join("apply.rs")];
    rust_files(&om.join("apply"), &mut files);
    let banned = [
        "DeferredSeekIter",
        "get_pinned",
        "get_cf",
        "raw_iterator",
        "iterator_cf",
        "multi_get",
        ".db()",
        "rocksdb::DB",
        "&DB",
    ];
    let mut wrong = Vec::new();
    // `standalone` builds a view over a plain database (tests and tools).
    for f in files
        .iter()
        .filter(|f| !is_test_file(f) && !f.ends_with("apply/standalone.rs"))
    {
        let src = std::fs::read_to_string(f).unwrap();
        for line in code_lines(&src) {
            let named = banned.iter().find(|b| line.contains(*b));
            let under_view = line.contains(".rocks()") && !line.contains("table::cf(");
            if named.is_some() || under_view {
                wrong.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(files.len() > 10, "apply sources not found: {files:?}");
    assert!(
        wrong.is_empty(),
        "apply reads around its view:\n{}",
        wrong.join("\n")
    );
}

/// Every behaviour change of apply is a named rule (`om::rules`): no source
/// outside it compares a rules version with a number, and every `Rule`
/// constant it defines is in its `HISTORY`.
#[test]
fn rules_gates_are_named() {
    let om = workspace().join("om/src");
    let mut files = Vec::new();
    rust_files(&om, &mut files);
    let mut wrong = Vec::new();
    for f in files
        .iter()
        .filter(|f| !is_test_file(f) && !f.ends_with("om/src/rules.rs"))
    {
        let src = std::fs::read_to_string(f).unwrap();
        for line in code_lines(&src) {
            if bare_rules_gate(&line) {
                wrong.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    let rules = std::fs::read_to_string(om.join("rules.rs")).unwrap();
    let code = code_lines(&rules).join("\n");
    let history = &code[code.find("pub const HISTORY").expect("rules::HISTORY")..];
    let mut named = 0;
    for line in code.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const ") else {
            continue;
        };
        let Some((name, ty)) = rest.split_once(':') else {
            continue;
        };
        if ty.trim_start().starts_with("Rule ") || ty.trim_start().starts_with("Rule=") {
            named += 1;
            if !history.contains(&format!("(\"{name}\", {name})")) {
                wrong.push(format!("rules::{name} is missing from rules::HISTORY"));
            }
        }
    }
    assert!(named > 10, "no rules found in om/src/rules.rs");
    assert!(
        wrong.is_empty(),
        "rules gates without a name (add a Rule to om/src/rules.rs):\n{}",
        wrong.join("\n")
    );
}

/// Every replicated operation of the schema (`oneof op` in `store.proto`) is
/// listed once in `apply::ops` and has exactly one `Operation` implementation
/// in `om/src/apply/`, which names its rights (the compiler holds the rest of
/// the contract: the dispatch is derived from the list with no catch-all).
#[test]
fn every_operation_has_one_home() {
    let root = workspace();
    let proto = std::fs::read_to_string(root.join("proto/proto/om/v1/store.proto")).unwrap();
    let oneof = proto
        .split_once("oneof op {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .expect("store.proto's oneof op")
        .0;
    let schema: BTreeSet<String> = oneof
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let ops = std::fs::read_to_string(root.join("om/src/apply/ops.rs")).unwrap();
    let code = code_lines(&ops).join("\n");
    let list = code
        .rsplit_once("ops! {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .expect("the ops! list in om/src/apply/ops.rs")
        .0;
    let listed: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let mut wrong = Vec::new();
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    if unique.len() != listed.len() {
        wrong.push("an operation is listed twice in ops!".to_string());
    }
    for n in schema.symmetric_difference(&unique) {
        wrong.push(format!(
            "{n}: in only one of store.proto's oneof op and ops!"
        ));
    }
    let mut files = Vec::new();
    rust_files(&root.join("om/src/apply"), &mut files);
    let mut impls: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in files.iter().filter(|f| !is_test_file(f)) {
        let src = code_lines(&std::fs::read_to_string(f).unwrap()).join("\n");
        for (i, _) in src.match_indices("impl Operation for om_proto::store::") {
            let rest = &src[i + "impl Operation for om_proto::store::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            let body = rest.split_once("\n}").map_or(rest, |(b, _)| b);
            if !body.contains("fn rights(") {
                wrong.push(format!("{name}: its Operation names no rights"));
            }
            impls.entry(name).or_default().push(f.display().to_string());
        }
    }
    for n in &schema {
        match impls.get(n).map(Vec::len) {
            Some(1) => {}
            Some(k) => wrong.push(format!("{n}: {k} Operation implementations")),
            None => wrong.push(format!("{n}: no Operation implementation in om/src/apply/")),
        }
    }
    assert!(schema.len() > 30, "no operations found in store.proto");
    assert!(wrong.is_empty(), "operations:\n{}", wrong.join("\n"));
}

/// A comparison of a rules version with a number: `rules >= 8`,
/// `self.rules < 10`, `cmd.rules == 0`.
fn bare_rules_gate(line: &str) -> bool {
    let mut rest = line;
    while let Some(i) = rest.find("rules") {
        let after = rest[i + "rules".len()..].trim_start();
        let before_ok = i == 0 || {
            let c = rest.as_bytes()[i - 1];
            !(c.is_ascii_alphanumeric() || c == b'_')
        };
        let op = ["<=", ">=", "==", "!=", "<", ">"]
            .iter()
            .find(|op| after.starts_with(**op));
        if before_ok
            && let Some(op) = op
            && after[op.len()..]
                .trim_start()
                .starts_with(|c: char| c.is_ascii_digit())
        {
            return true;
        }
        rest = &rest[i + "rules".len()..];
    }
    false
}

#[test]
fn the_rules_check_sees_bare_gates() {
    assert!(bare_rules_gate("if self.rules >= 8 {"));
    assert!(bare_rules_gate("let x = (rules < 10) && y;"));
    assert!(bare_rules_gate("if cmd.rules == 0 {"));
    assert!(!bare_rules_gate("if rules::X.holds(self.rules) {"));
    assert!(!bare_rules_gate("if cmd.rules > RULES {"));
    assert!(!bare_rules_gate("let max_rules = 3; if max_rules < 4 {}"));
}
