//! The house's layering, checked: no module imports one from a layer above it. Reads `src/` as
//! text (every `crate::<module>` outside comments) so a new arrow running back up fails here,
//! not in a review.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layers, bottom first. A module may use its own layer and those below it.
const LAYERS: &[&[&str]] = &[
    // The vocabulary, and the error every store call gives.
    &["domain", "store"],
    // Capabilities (traits beside their types, pure judges) and the provider adapters.
    &[
        "idempotency",
        "payments",
        "payouts",
        "ledger",
        "eventlog",
        "providers",
    ],
    // What decides and reads, over the capabilities, and the metric lines it writes.
    &[
        "pipeline",
        "read",
        "replay",
        "reconcile",
        "metrics",
        "audit",
    ],
    // Adapters to the outside: DynamoDB, HTTP.
    &["dynamodb", "http", "secrets"],
    // Assembly: configuration, process start-up, the command line.
    &["config", "runtime", "cli", "console"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under src/ belongs to (`src/payments/mod.rs` -> `payments`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = BTreeMap::new();
    let mut checked = 0;
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let Some(own) = layer_of(&module) else {
            continue; // lib.rs, the binaries
        };
        checked += 1;
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for used in code.split("crate::").skip(1) {
                let name: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if let Some(theirs) = layer_of(&name) {
                    if theirs > own {
                        problems.insert(
                            format!("{}:{}", file.display(), n + 1),
                            format!("{module} (layer {own}) uses {name} (layer {theirs})"),
                        );
                    }
                }
            }
        }
    }
    assert!(checked > 40, "read only {checked} files under src/");
    assert!(
        problems.is_empty(),
        "imports running back up a layer:\n{problems:#?}"
    );
}

#[test]
fn every_module_has_a_layer() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(m) = line.strip_prefix("pub mod ") {
            let m = m.trim_end_matches(';');
            assert!(
                layer_of(m).is_some(),
                "module {m} has no layer in tests/it/layers.rs"
            );
        }
    }
}

/// Which top-level modules each top-level module names (`crate::x`), outside comments.
fn module_graph() -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        if layer_of(&module).is_none() {
            continue; // lib.rs, the binaries
        }
        let text = std::fs::read_to_string(file).unwrap();
        let uses = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for used in code.split("crate::").skip(1) {
                let name: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name != module && layer_of(&name).is_some() {
                    uses.insert(name);
                }
            }
        }
    }
    graph
}

/// A circle of modules, if any: the path from a module back to itself.
fn a_circle(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at.to_owned());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

/// Layers only say what may import what across them; inside a layer two modules could still
/// import each other (payouts and providers once did). No module may reach itself.
#[test]
fn no_circle_of_modules_even_inside_a_layer() {
    let graph = module_graph();
    assert!(graph.len() > 15, "read only {} modules", graph.len());
    assert_eq!(a_circle(&graph), None, "a circle of imports");
}

/// The files of one module (`src/dynamodb/*.rs`) and which of their siblings each uses
/// (`super::x`, `crate::dynamodb::x`), outside comments.
fn file_graph(module: &str) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let name = |p: &Path| {
        p.file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_owned()
    };
    let siblings: std::collections::BTreeSet<String> = files
        .iter()
        .filter(|f| f.parent() == Some(dir.as_path()))
        .map(|f| name(f))
        .filter(|n| n != "mod")
        .collect();
    let mut graph = BTreeMap::new();
    for file in files.iter().filter(|f| f.parent() == Some(dir.as_path())) {
        let own = name(file);
        let text = std::fs::read_to_string(file).unwrap();
        let mut uses = std::collections::BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for prefix in ["super::", &format!("crate::{module}::")] {
                for used in code.split(prefix).skip(1) {
                    let target: String = used
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if target != own && siblings.contains(&target) {
                        uses.insert(target);
                    }
                }
            }
        }
        graph.insert(own, uses);
    }
    graph
}

/// Two files of one module importing each other are a circle too (`dynamodb/disputes.rs` and
/// `dynamodb/payments.rs` once were): what both need lives below both.
#[test]
fn no_circle_between_the_files_of_a_module() {
    let mut read = 0;
    for module in [
        "dynamodb",
        "pipeline",
        "payouts",
        "payments",
        "providers",
        "http",
        "reconcile",
        "cli",
    ] {
        let graph = file_graph(module);
        read += graph.len();
        assert_eq!(
            a_circle(&graph),
            None,
            "a circle of imports inside {module}"
        );
    }
    assert!(read > 40, "read only {read} files");
    // The check sees a planted one.
    let mut graph = file_graph("dynamodb");
    graph
        .entry("payments".into())
        .or_default()
        .insert("disputes".into());
    graph
        .entry("disputes".into())
        .or_default()
        .insert("payments".into());
    assert!(a_circle(&graph).is_some());
}

#[test]
fn the_circle_check_finds_a_circle_inside_a_layer() {
    let mut graph = module_graph();
    graph
        .entry("providers".into())
        .or_default()
        .insert("payouts".into());
    graph
        .entry("payouts".into())
        .or_default()
        .insert("providers".into());
    let circle = a_circle(&graph).expect("the planted circle");
    assert!(circle.contains(&"payouts".to_owned()) && circle.contains(&"providers".to_owned()));
}

/// The workspace's crates, bottom first: a crate's `[dependencies]` name only crates below it.
/// (Tests may reach up: payhook's integration tests check the capacity model in
/// `payhook-tools`, a dev-dependency the shipped library and binary never link.)
const CRATES: &[(&str, &str)] = &[
    ("dynamo-claim", "crates/claim"),
    ("payhook", "."),
    ("payhook-tools", "crates/tools"),
];

/// The workspace crates a manifest's `[dependencies]` (and build and target-specific, never
/// dev) name.
fn workspace_deps(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut table = String::new();
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.to_owned();
            continue;
        }
        if !table.contains("dependencies") || table.contains("dev-dependencies") {
            continue;
        }
        let name = line.split(['=', ' ', '.']).next().unwrap_or_default();
        if CRATES.iter().any(|(c, _)| *c == name) {
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn crate_edges_point_down_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (at, (name, dir)) in CRATES.iter().enumerate() {
        let manifest = root.join(dir).join("Cargo.toml");
        for dep in workspace_deps(manifest.to_str().unwrap()) {
            let below = CRATES[..at].iter().any(|(c, _)| *c == dep);
            assert!(below, "{name} depends on {dep}, which is not below it");
        }
    }
    // The claim crate names nothing of payhook, in its code or its tests and example.
    for sub in ["src", "tests", "examples"] {
        let mut files = Vec::new();
        rust_files(&root.join("crates/claim").join(sub), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                !text.contains("payhook::"),
                "{} names payhook",
                file.display()
            );
        }
    }
    assert_eq!(
        workspace_deps(root.join("Cargo.toml").to_str().unwrap()),
        ["dynamo-claim"]
    );
    assert_eq!(
        workspace_deps(root.join("crates/tools/Cargo.toml").to_str().unwrap()),
        ["payhook", "dynamo-claim"]
    );
}

/// The claim crate's modules, bottom first.
const CLAIM_LAYERS: &[&[&str]] = &[
    &["error", "protocol"],
    &["clock", "item", "cache"],
    &["table"],
    &["store"],
    &["idempotent"],
    &["lambda", "batch", "http"],
];

/// Which of the claim crate's modules each of its modules uses: `crate::module` paths, and the
/// names its lib.rs re-exports (`crate::{ClaimTable, …}` means `table`).
fn claim_graph() -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/claim/src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexports = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(rest) = stmt
            .trim()
            .rsplit("pub use ")
            .next()
            .filter(|_| stmt.contains("pub use "))
        else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        for name in names.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                reexports.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file).filter(|m| m != "lib") else {
            continue;
        };
        let uses = graph.entry(module.clone()).or_default();
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let code = line.split("//").next().unwrap_or_default();
            for used in code.split("crate::").skip(1) {
                let path: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || "_{}, ".contains(*c))
                    .collect();
                for name in path.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    let target = reexports
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| name.to_owned());
                    if target != module && CLAIM_LAYERS.iter().any(|l| l.contains(&target.as_str()))
                    {
                        uses.insert(target);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn the_claim_crates_modules_point_down_and_make_no_circle() {
    let graph = claim_graph();
    let layer = |m: &str| CLAIM_LAYERS.iter().position(|l| l.contains(&m));
    assert_eq!(graph.len(), 11, "every module of the crate read: {graph:?}");
    for (module, uses) in &graph {
        let own = layer(module).unwrap_or_else(|| panic!("{module} has no layer in CLAIM_LAYERS"));
        for used in uses {
            assert!(
                layer(used).is_some_and(|l| l <= own),
                "{module} (layer {own}) uses {used}, a layer above"
            );
        }
    }
    assert_eq!(a_circle(&graph), None);
    // The re-exported names are followed: the table's use of `crate::{StoreClock, …}` counts.
    assert!(graph["table"].contains("clock"), "{graph:?}");
}

/// Each package with its features, as `cargo tree` resolves them for `args`.
fn resolved(args: &[&str]) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(root)
        .args([
            "tree",
            "--locked",
            "--offline",
            "--prefix",
            "none",
            "-f",
            "{p} {f}",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packages = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.replace(" (*)", "");
        let mut parts = line.split(' ');
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else {
            continue;
        };
        let features: Vec<&str> = parts
            .filter(|p| !p.starts_with('(') && !p.starts_with('/'))
            .collect();
        packages
            .entry(format!("{name} {version}"))
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(features.join(" "));
    }
    packages
}

/// `scripts/dev` builds only the payhook binary and `scripts/test` then builds every test: that
/// is one build only while each package the binary needs resolves with the same features in
/// both (crates/workspace-hack pins them). A new dev-dependency that turns a feature on below
/// the binary fails here, before it makes a fresh clone compile the AWS SDK twice.
#[test]
fn the_demo_build_and_the_test_build_resolve_every_package_alike() {
    let demo = resolved(&["-p", "payhook", "-e", "normal,build"]);
    let tests = resolved(&["--workspace", "-e", "normal,dev,build"]);
    assert!(demo.len() > 200, "read only {} packages", demo.len());
    let differ: Vec<String> = demo
        .iter()
        .filter(|(package, features)| tests.get(*package).is_some_and(|f| f != *features))
        .map(|(package, features)| {
            format!("{package}: demo {features:?} tests {:?}", tests[package])
        })
        .collect();
    assert!(
        differ.is_empty(),
        "pin these in crates/workspace-hack/Cargo.toml:\n{}",
        differ.join("\n")
    );
}
