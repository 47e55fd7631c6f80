//! The HTTP example (`examples/http.rs`) from outside: served in this process through its
//! `app`, and as the built binary, spawned with `--create-table` and read from its `listening
//! on` line. The same requests to both, over loopback with a plain HTTP/1.1 client, and the
//! same counts: the charges the service made (`GET /charges`) and the claims its table keeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

#[allow(dead_code)]
#[path = "../examples/http.rs"]
mod example;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dynamo_claim::{ClaimState, ClaimTable};
use support::{send, Reply};

/// The lease of the service the concurrent copies meet: longer than any answer takes, on a
/// loaded machine too (a copy that met an expired lease would take over and charge again).
const LEASE_MS: i64 = 30_000;
/// The lease of the service the large answer is retried against: short, so a retry after it
/// is cheap to wait for.
const SHORT_LEASE_MS: i64 = 300;

async fn charges(addr: &str) -> u64 {
    let got = send(addr, "GET", "/charges", &[], b"").await;
    assert_eq!(got.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    doc["charges"].as_u64().unwrap()
}

async fn post(addr: &str, key: Option<&str>, body: &str) -> Reply {
    let mut headers = vec![("content-type", "application/json"), ("x-tenant", "t1")];
    if let Some(key) = key {
        headers.push(("idempotency-key", key));
    }
    send(addr, "POST", "/charges", &headers, body.as_bytes()).await
}

/// The kept claims of `table`, as their states.
async fn states(table: &str) -> Vec<String> {
    let mut states: Vec<String> = support::records(table)
        .await
        .into_iter()
        .map(|r| match r.state {
            ClaimState::Done(s) => format!("done {}", s.status),
            ClaimState::DoneUnrecorded { status } => format!("unrecorded {status}"),
            ClaimState::InProgress { .. } => "in_progress".to_owned(),
        })
        .collect();
    states.sort();
    states
}

/// Concurrent copies, another body, no key: against the service at `addr` (claims in `table`,
/// lease [`LEASE_MS`]).
async fn copies_charge_once(addr: &str, table: &str) {
    // 20 concurrent copies of one request: one charge; each other copy is a replay of its
    // answer or a 409 while it runs.
    let body = r#"{"amount_minor":500,"memo":"order 1 \u00e9 \ud83d\udcb8"}"#;
    let copies: Vec<_> = (0..20)
        .map(|_| {
            let addr = addr.to_owned();
            tokio::spawn(async move { post(&addr, Some("k-concurrent"), body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.unwrap());
    }
    let fresh: Vec<&Reply> = answers
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .collect();
    let replays: Vec<&Reply> = answers
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("true"))
        .collect();
    let busy = answers.iter().filter(|r| r.status == 409).count();
    assert_eq!(fresh.len(), 1, "{answers:?}");
    assert_eq!(replays.len() + busy, 19, "{answers:?}");
    for r in answers.iter().filter(|r| r.status == 409) {
        assert!(r.header("retry-after").is_some());
    }
    let first = fresh[0];
    let record: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(record["charge"], "ch_1");
    assert_eq!(record["memo"], "order 1 \u{e9} \u{1f4b8}");
    for r in &replays {
        assert_eq!((r.status, &r.body), (201, &first.body));
        assert_eq!(r.header("x-charge-attempt"), None, "not a marked header");
    }
    // Once the first is done, every copy is its replay.
    let again = post(addr, Some("k-concurrent"), body).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!((again.status, &again.body), (201, &first.body));
    assert_eq!(charges(addr).await, 1);

    // Another body under the key: 422. No key: 400.
    let other = post(
        addr,
        Some("k-concurrent"),
        r#"{"amount_minor":999,"memo":"x"}"#,
    )
    .await;
    assert_eq!(other.status, 422);
    assert_eq!(post(addr, None, body).await.status, 400);
    assert_eq!(charges(addr).await, 1);
    assert_eq!(states(table).await, ["done 201"]);
}

/// A 600 KB memo: its answer is too large to store; it charges once however often it is
/// retried, also after the lease ([`SHORT_LEASE_MS`]).
async fn a_large_answer_charges_once(addr: &str, table: &str) {
    let memo = "m".repeat(600 * 1024);
    let big = serde_json::json!({"amount_minor": 700, "memo": memo}).to_string();
    let first_big = post(addr, Some("k-big"), &big).await;
    assert_eq!(first_big.status, 201);
    let record: serde_json::Value = serde_json::from_slice(&first_big.body).unwrap();
    assert_eq!(record["memo"].as_str(), Some(memo.as_str()));
    for round in 0..4 {
        if round >= 2 {
            tokio::time::sleep(Duration::from_millis(3 * SHORT_LEASE_MS as u64)).await;
        }
        let again = post(addr, Some("k-big"), &big).await;
        assert_eq!(again.status, 201, "round {round}");
        assert_eq!(again.header("idempotency-answer"), Some("not-recorded"));
        assert!(again.body.is_empty());
    }
    assert_eq!(charges(addr).await, 1);
    assert_eq!(states(table).await, ["unrecorded 201"]);
}

/// The example's `app` served in this process: its address and its table's name.
async fn in_process(lease_ms: i64) -> (String, String, tokio::task::JoinHandle<()>) {
    let table = support::table("example").await;
    let name = table.name().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        axum::serve(listener, example::app(table, lease_ms))
            .await
            .unwrap();
    });
    (addr, name, server)
}

#[tokio::test]
async fn the_example_in_process_charges_each_key_once() {
    let (addr, table, server) = in_process(LEASE_MS).await;
    copies_charge_once(&addr, &table).await;
    server.abort();
    let (addr, table, server) = in_process(SHORT_LEASE_MS).await;
    a_large_answer_charges_once(&addr, &table).await;
    server.abort();
}

/// The example as built by cargo, next to this test's own binary (`target/<profile>/examples`).
/// Built here first: `cargo test --test http_example` alone does not build examples.
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf();
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let mut build = Command::new(env!("CARGO"));
    build.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "-p",
        "dynamo-claim",
        "--features",
        "http",
        "--example",
        "http",
    ]);
    if release {
        build.arg("--release");
    }
    let status = build.status().unwrap();
    assert!(status.success(), "cargo build --example http failed");
    let binary = profile_dir.join("examples").join("http");
    assert!(binary.exists(), "no example at {}", binary.display());
    binary
}

/// The spawned example, ended with the test.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The built example, spawned with `--create-table` on a port of its choosing: its address
/// (from its first line) and its table's name.
async fn spawned(binary: &std::path::Path, lease_ms: i64) -> (Spawned, String, String) {
    let table = support::table_name("example-bin");
    let mut child = Command::new(binary)
        .arg("--create-table")
        .env("CLAIMS_TABLE", &table)
        .env("AWS_ENDPOINT_URL_DYNAMODB", support::endpoint())
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_REGION", "us-east-1")
        .env("CLAIM_LEASE_MS", lease_ms.to_string())
        .env("ADDR", "127.0.0.1:0")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env_remove("AWS_PROFILE")
        .env_remove(dynamo_claim::DISABLED_VAR)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Spawned(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("the first line is {line:?}"))
        .to_owned();
    // `--create-table` made the table before serving.
    let kept = ClaimTable::new(&support::client(), &table)
        .get("none")
        .await;
    assert!(kept.unwrap().is_none());
    (child, addr, table)
}

#[tokio::test]
async fn the_built_example_charges_each_key_once() {
    let binary = example_binary();
    let (child, addr, table) = spawned(&binary, LEASE_MS).await;
    copies_charge_once(&addr, &table).await;
    drop(child);
    let (child, addr, table) = spawned(&binary, SHORT_LEASE_MS).await;
    a_large_answer_charges_once(&addr, &table).await;
    drop(child);
}
