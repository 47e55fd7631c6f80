//! The `payhook` binary as an operator runs it: where a `payhook serve` delivery's EMF line
//! goes (stdout must stay clean for results unless asked), and the exit codes scripts rely on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use payhook::cli::client::post;
use payhook::dynamodb::DynamoStore;
use payhook::providers::generic::StandardWebhooks;

fn payhook(store: &DynamoStore) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_payhook"));
    payhook_env(&mut cmd, store).env("RUST_LOG", "error");
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `payhook serve` with `extra` flags, delivers one new payment, stops the server and
/// returns what it wrote. The delivery's EMF line is written before its answer is sent, so
/// once the answer arrived the line is in the pipe.
async fn serve_one_delivery(store: &DynamoStore, name: &str, extra: &[&str]) -> Output {
    let port = free_port();
    let child = payhook(store)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn payhook serve");
    let body = payment_body(
        &format!("e_{name}"),
        &format!("r_{name}"),
        "w_cli",
        100,
        "NGN",
    );
    let scheme = StandardWebhooks::from_env_value(SECRET, 300).unwrap();
    let url = format!("http://127.0.0.1:{port}/webhooks/generic");
    let mut status = 0;
    for _ in 0..200 {
        let ts = now_s();
        let headers = vec![
            ("webhook-id".to_owned(), format!("msg_{name}")),
            ("webhook-timestamp".to_owned(), ts.to_string()),
            (
                "webhook-signature".to_owned(),
                scheme.sign(&format!("msg_{name}"), ts, body.as_bytes()),
            ),
        ];
        if let Ok(r) = post(&url, &headers, body.clone().into_bytes()).await {
            status = r.status;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut child = child;
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        status,
        200,
        "the delivery was not applied; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn emf_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect()
}

#[tokio::test]
async fn serve_writes_emf_lines_only_where_asked() {
    // GIVEN fresh tables
    let store = store("cli_metrics").await;

    // WHEN `payhook serve` applies a delivery without --metrics
    let quiet = serve_one_delivery(&store, "quiet", &[]).await;
    // THEN neither stdout nor stderr carries an EMF line
    assert_eq!(emf_lines(&quiet.stdout), Vec::<serde_json::Value>::new());
    assert_eq!(emf_lines(&quiet.stderr), Vec::<serde_json::Value>::new());

    // WHEN asked for EMF: one Applied line on stdout, as CloudWatch reads it in Lambda
    let emf = serve_one_delivery(&store, "emf", &["--metrics", "emf"]).await;
    let lines = emf_lines(&emf.stdout);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["Applied"], 1);
    assert_eq!(lines[0]["Provider"], "generic");

    // WHEN asked for stderr: the line is there and stdout stays clean
    let side = serve_one_delivery(&store, "side", &["--metrics", "stderr"]).await;
    assert!(emf_lines(&side.stdout).is_empty());
    assert_eq!(emf_lines(&side.stderr).len(), 1);
}

#[tokio::test]
async fn exit_codes_tell_usage_from_failure() {
    let store = store("cli_exit").await;
    let run = |args: &[&str]| payhook(&store).args(args).output().unwrap();

    // A sink clap does not know is a usage error (2), named in the message.
    let bad_sink = run(&["serve", "--metrics", "cloudwatch"]);
    assert_eq!(bad_sink.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_sink.stderr).contains("off, emf (stdout) or stderr"));

    // So is a time nobody could read, or one given both ways.
    let bad_time = run(&["events", "--since", "last tuesday"]);
    assert_eq!(bad_time.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_time.stderr).contains("duration back from now"));
    let both = run(&["replay", "--since", "24h", "--since-ms", "5", "--dry-run"]);
    assert_eq!(both.status.code(), Some(2));

    // A value the command itself refuses (CliError::Usage) is also 2.
    let bad_outcome = run(&["events", "--outcome", "nonsense"]);
    assert_eq!(bad_outcome.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_outcome.stderr).contains("unknown outcome"));

    // A well-formed command that fails is 1, with nothing on stdout.
    let unknown = run(&["balance", "nobody_here"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(unknown.stdout.is_empty());

    // And success is 0.
    assert_eq!(run(&["events", "--limit", "1"]).status.code(), Some(0));
}

/// A stand-in for DynamoDB that answers every `DescribeTable` with a global table replicated in
/// two Regions with multi-Region eventual consistency (what dynalite cannot show).
async fn eventual_global_tables() -> String {
    let app =
        axum::Router::new().fallback(|headers: axum::http::HeaderMap, body: String| async move {
            let target = headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let name = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|b| b["TableName"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let answer = if target.ends_with(".DescribeTable") {
                serde_json::json!({"Table": {"TableName": name, "TableStatus": "ACTIVE",
                "Replicas": [{"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"},
                             {"RegionName": "us-east-1", "ReplicaStatus": "ACTIVE"}],
                "MultiRegionConsistency": "EVENTUAL"}})
            } else {
                serde_json::json!({})
            };
            (
                [("content-type", "application/x-amz-json-1.0")],
                answer.to_string(),
            )
        });
    serve_fake(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_tables_replicated_with_eventual_consistency() {
    // GIVEN tables that DynamoDB describes as a global table with eventual consistency
    let store = store("cli_regions").await;
    let endpoint = eventual_global_tables().await;

    // WHEN `payhook serve` starts on them (given 30 s to give up)
    let out = tokio::task::spawn_blocking(move || {
        let mut child = payhook(&store)
            .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
            .args(["serve", "--addr", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        for _ in 0..300 {
            if child.try_wait().unwrap().is_some() {
                return child.wait_with_output().unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.kill().unwrap();
        panic!("payhook serve started on eventually consistent replicas");
    })
    .await
    .unwrap();

    // THEN it was ready at once (the check runs off the path to ready) and exits with the
    // reason once the check answers, instead of serving money
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("payhook listening on"), "{stderr}");
    assert!(
        stderr.contains("multi-Region eventual consistency") && stderr.contains("last writer wins"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_and_the_first_claim_refuse_eventually_consistent_replicas() {
    // GIVEN tables described as a global table with eventual consistency
    let store = store("cli_doctor").await;
    let endpoint = eventual_global_tables().await;
    // WHEN `payhook doctor` checks them
    let (s, e) = (store.clone(), endpoint.clone());
    let out = tokio::task::spawn_blocking(move || {
        payhook(&s)
            .env("AWS_ENDPOINT_URL_DYNAMODB", e)
            .arg("doctor")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    // THEN it says money must not move, and why, and exits 1
    assert_eq!(out.status.code(), Some(1));
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["money_may_move"], false);
    assert!(verdict["reason"]
        .as_str()
        .unwrap()
        .contains("last writer wins"));
    // AND on the real (single-Region) tables money may move
    let s = store.clone();
    let out = tokio::task::spawn_blocking(move || payhook(&s).arg("doctor").output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["money_may_move"], true);
    assert_eq!(verdict["tables"].as_array().unwrap().len(), 4);

    // WHEN a gated store's first claim meets them (what a Lambda's first delivery does)
    let gated = payhook::dynamodb::DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(common::sdk_builder().endpoint_url(&endpoint).build()),
        store.tables().clone(),
        common::settings(),
    )
    .with_replication_gate();
    use payhook::idempotency::Claims;
    let key = payhook::domain::IdempotencyKey::from_stored("generic:payment:pay_gate".into());
    let fp = payhook::domain::Fingerprint::from_stored("{}".into());
    let claimed = gated.claim(&key, &fp, 30_000).await;
    // THEN it is refused (retryable: answered 503), with the reason
    let err = claimed.expect_err("a claim on eventual replicas");
    let why = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(why.contains("last writer wins"), "{err:?}");
    // AND so is a credit's claim held on its payment, taken by the paid write (#32)
    use payhook::payments::{NewCredit, NewHostClaim, Payments};
    let facts = payhook::domain::PaymentFacts {
        reference: payhook::domain::Reference::parse("pay_gate").unwrap(),
        account: Some(payhook::domain::AccountId::parse("w_gate").unwrap()),
        money: payhook::domain::Money::new(100, payhook::domain::Currency::parse("NGN").unwrap())
            .unwrap(),
    };
    let token = payhook::idempotency::OwnerToken::generate();
    let new = NewCredit {
        shard: 0,
        default_account: None,
        claim: Some(NewHostClaim {
            token: &token,
            lease_ms: 30_000,
            fingerprint: &fp,
        }),
    };
    let paid = gated
        .mark_paid(payhook::domain::ProviderId::GENERIC, &facts, &key, new)
        .await;
    let err = paid.expect_err("a credit's claim on eventual replicas");
    let why = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(why.contains("last writer wins"), "{err:?}");
    // AND so is a refund's claim held on its payment, taken by the refund's write (#44)
    let refund = payhook::domain::RefundFacts {
        refund_reference: payhook::domain::Reference::parse("rf_gate").unwrap(),
        payment_reference: facts.reference.clone(),
        money: facts.money,
    };
    let refund_key = payhook::domain::IdempotencyKey::from_stored("generic:refund:rf_gate".into());
    let claim = NewHostClaim {
        token: &token,
        lease_ms: 30_000,
        fingerprint: &fp,
    };
    let hosted = gated
        .hold(
            payhook::domain::ProviderId::GENERIC,
            payhook::payments::HeldMove::Refund(&refund),
            &refund_key,
            claim,
        )
        .await;
    let err = hosted.expect_err("a refund's claim on eventual replicas");
    let why = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(why.contains("last writer wins"), "{err:?}");
}

/// The audit lines (`payhook::audit`) a command wrote to stderr, as JSON.
fn audit_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["target"] == "payhook::audit")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_actions_write_one_audit_line_each_saying_who_what_when_and_how() {
    // GIVEN an operator's command line, logging JSON as inside Lambda, quietened to warnings
    // (as scripts/dev runs it): audit lines are written whatever the level
    let store = store("cli_audit").await;
    let run = |args: &'static [&'static str]| {
        let mut cmd = payhook(&store);
        cmd.env("RUST_LOG", "warn")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env("USER", "ada")
            .args(args);
        async move {
            tokio::task::spawn_blocking(move || cmd.output().unwrap())
                .await
                .unwrap()
        }
    };

    // WHEN the layout is grown, a payment registered twice with different accounts,
    // deliveries replayed and a reconciliation pass run
    let grow = run(&["ledger", "shards", "--grow", "8"]).await;
    let expect = &[
        "payments",
        "expect",
        "--provider",
        "generic",
        "--reference",
        "pay_audit",
        "--account",
        "w_audit",
        "--amount",
        "500",
        "--currency",
        "NGN",
    ];
    let first = run(expect).await;
    let other = run(&[
        "payments",
        "expect",
        "--provider",
        "generic",
        "--reference",
        "pay_audit",
        "--account",
        "w_other",
        "--amount",
        "500",
        "--currency",
        "NGN",
    ])
    .await;
    let replay = run(&["replay", "--outcome", "unassigned"]).await;
    let pass = run(&["reconcile"]).await;

    // THEN each wrote one audit line: who, the action, its detail, when and how it ended
    let line = |out: &Output| {
        let lines = audit_lines(out);
        assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
        lines[0]["fields"].clone()
    };
    let g = line(&grow);
    assert_eq!(
        (
            g["who"].as_str(),
            g["action"].as_str(),
            g["outcome"].as_str()
        ),
        (Some("cli:ada"), Some("ledger.grow"), Some("ok"))
    );
    assert!(
        g["result"]
            .as_str()
            .unwrap_or("")
            .contains("\"ledger_shards\":8"),
        "{g}"
    );
    assert!(g["at_ms"].as_i64().unwrap_or(0) > 1_700_000_000_000, "{g}");
    let f = line(&first);
    assert_eq!(
        (f["action"].as_str(), f["result"].as_str()),
        (Some("payments.expect"), Some("\"created\""))
    );
    assert!(
        f["detail"].as_str().unwrap_or("").contains("w_audit"),
        "{f}"
    );
    assert_eq!(line(&other)["result"].as_str(), Some("\"mismatch\""));
    let p = line(&pass);
    assert_eq!(
        (p["action"].as_str(), p["outcome"].as_str()),
        (Some("reconcile"), Some("ok"))
    );
    assert!(
        p["result"].as_str().unwrap_or("").contains("needs_human"),
        "{p}"
    );
    let r = line(&replay);
    assert_eq!(
        (
            r["who"].as_str(),
            r["action"].as_str(),
            r["outcome"].as_str()
        ),
        (Some("cli:ada"), Some("replay"), Some("ok"))
    );
}
