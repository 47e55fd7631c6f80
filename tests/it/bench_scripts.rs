//! benches/cpu.py (the whole-process CPU bench of `scripts/bench`) still drives both ways the
//! binary runs: `payhook serve`, and the Lambda path through the script's emulated Runtime API
//! (the binary's current-thread runtime under `lambda_http`). `--check` sends 3 deliveries per
//! class and checks every answer (200 applied for new and duplicate, 401 for a bad signature);
//! this test then counts what landed in the tables. No figure is asserted: speed is shown by
//! `scripts/bench`, never by a test. The Python reference is not run here (it needs its venv).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Command;

use common::*;

#[tokio::test]
async fn the_cpu_bench_drives_serve_and_the_emulated_lambda_runtime() {
    // GIVEN fresh tables and the payhook binary
    let store = store("benchcpu").await;
    let root = env!("CARGO_MANIFEST_DIR");

    // WHEN benches/cpu.py runs its quick check against both payhook targets
    let out = payhook_env(&mut Command::new("python3"), &store)
        .arg(format!("{root}/benches/cpu.py"))
        .args([
            "--check",
            "--targets",
            "payhook-serve,payhook-lambda",
            "--payhook",
            env!("CARGO_BIN_EXE_payhook"),
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run python3 benches/cpu.py");
    assert!(
        out.status.success(),
        "cpu.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // THEN it reports every class and init for both paths, and the Lambda init on https
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for target in ["payhook-serve", "payhook-lambda"] {
        for class in ["new", "duplicate", "bad_signature"] {
            assert!(
                report["targets"][target]["per_delivery"][class]["cpu_ms"].is_number(),
                "{target} {class}: {report}"
            );
        }
        assert!(
            report["targets"][target]["init"]["ready_ms"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }
    assert!(
        report["targets"]["payhook-lambda"]["init_https"]["ready_ms"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // AND init was timed with DynamoDB unreachable too (a listener that never answers): both
    // paths became ready (no figure is asserted: speed is shown by scripts/bench)
    for target in ["payhook-serve", "payhook-lambda"] {
        let down = &report["targets"][target]["init_unreachable"];
        assert!(
            down["ready_ms"].as_f64().unwrap_or(0.0) > 0.0,
            "{target}: {down}"
        );
    }

    // AND per target 5 new movements were applied once each (1 init run, 1 warm-up, 3 new), their
    // 3 duplicates moved nothing, and the 3 bad signatures wrote nothing: 10 payments (each
    // holding its credit's claim, #32, so no claims-table item) and ledger entries, 16 logged
    // deliveries.
    assert_eq!(counts(&store).await, [0, 10, 10, 16]);
}
