//! The MSRV this crate states (`rust-version`) is no lower than that of any crate it builds
//! with, as the lock file pins them (every feature on, build dependencies included, dev ones
//! not). A dependency that raises its own rust-version fails this test until the crate's is
//! raised too, so the stated one never promises a toolchain its dependencies refuse. The
//! crate's own code is held to the same version by clippy's `incompatible_msrv` lint (std
//! APIs newer than `rust-version`), which reads it from Cargo.toml.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `1.84` and `1.84.0` alike.
fn version(text: &str) -> [u64; 3] {
    let mut v = [0; 3];
    for (slot, part) in v.iter_mut().zip(text.split('.')) {
        *slot = part.parse().unwrap_or(0);
    }
    v
}

/// The host's target triple (`rustc -vV`): metadata for it alone needs no download of crates
/// only other platforms use.
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(rustc).arg("-vV").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let host = text.lines().find_map(|l| l.strip_prefix("host: "));
    host.unwrap().to_owned()
}

#[test]
fn the_stated_rust_version_covers_every_locked_dependency() {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--format-version",
            "1",
            "--all-features",
        ])
        .args(["--filter-platform", &host()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let me = packages
        .values()
        .find(|p| p["name"] == "dynamo-claim")
        .unwrap();
    let stated = me["rust_version"].as_str().expect("rust-version is stated");

    // The closure of normal and build dependencies from this crate.
    let mut seen = BTreeSet::new();
    let mut todo = vec![me["id"].as_str().unwrap()];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let kinds = dep["dep_kinds"].as_array().unwrap();
            let builds = kinds
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            let pkg = dep["pkg"].as_str().unwrap();
            if builds && seen.insert(pkg) {
                todo.push(pkg);
            }
        }
    }
    assert!(seen.len() > 20, "the closure was walked: {}", seen.len());
    let needs: Vec<(String, &str)> = seen
        .iter()
        .filter_map(|id| {
            let p = packages[id];
            let v = p["rust_version"].as_str()?;
            (version(v) > version(stated)).then(|| {
                (
                    format!(
                        "{} {}",
                        p["name"].as_str().unwrap_or("?"),
                        p["version"].as_str().unwrap_or("?")
                    ),
                    v,
                )
            })
        })
        .collect();
    assert!(
        needs.is_empty(),
        "rust-version {stated} is below what these locked dependencies need: {needs:?}"
    );
}
