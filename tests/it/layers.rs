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
