//! Shared test harness: one dynalite per test process (or the endpoint already in
//! `AWS_ENDPOINT_URL_DYNAMODB`), uniquely named tables per test, signed-request builders.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod console_seed;
pub mod faults;
pub mod held;
pub mod item_size;
pub mod transfer_api;
pub mod webdriver;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use axum::body::Body;
use axum::http::Request;
use payhook::config::Config;
use payhook::dynamodb::{DynamoStore, StoreSettings, TableNames};
use payhook::http::App;
use payhook::providers::generic::StandardWebhooks;
use payhook::runtime::build_app;
use tower::ServiceExt;

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const OTHER_SECRET: &str = "whsec_c2Vjb25kLXNlY3JldC1mb3ItdGVzdHM=";

static ENDPOINT: OnceLock<String> = OnceLock::new();
/// Kept alive for the whole test process: its stdin closing (at exit) stops dynalite.
static DYNALITE: Mutex<Option<Child>> = Mutex::new(None);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The DynamoDB endpoint tests use: `AWS_ENDPOINT_URL_DYNAMODB` if set (dynalite started by the
/// test command, or DynamoDB Local), else a dynalite started for this test process.
pub fn endpoint() -> String {
    ENDPOINT
        .get_or_init(|| {
            if let Ok(e) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
                if !e.is_empty() {
                    return e;
                }
            }
            let root = env!("CARGO_MANIFEST_DIR");
            let mut child = Command::new("node")
                .arg(format!("{root}/scripts/dynalite.js"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start dynalite: run `npm ci` first");
            let mut line = String::new();
            BufReader::new(child.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("dynalite port");
            let port: u16 = line.trim().parse().expect("dynalite printed its port");
            *DYNALITE.lock().unwrap() = Some(child);
            format!("http://127.0.0.1:{port}")
        })
        .clone()
}

/// A unique table prefix for one test, so tests run in parallel without sharing state.
pub fn unique_prefix(name: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let rand: u32 = rand::random();
    format!("t-{name}-{}-{n}-{rand:08x}", std::process::id())
}

/// An SDK config builder pointed at the test endpoint with dummy credentials.
/// A client for the test endpoint. Timeouts are generous for a loaded 2-core machine, but a
/// reply that never comes fails the test instead of hanging the suite.
pub fn sdk_builder() -> aws_sdk_dynamodb::config::Builder {
    let timeouts = aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .operation_attempt_timeout(std::time::Duration::from_secs(30))
        .operation_timeout(std::time::Duration::from_secs(120))
        .build();
    // The binaries' client settings (`dynamodb::lean`), so the suite runs what production runs.
    payhook::dynamodb::lean::lean(aws_sdk_dynamodb::config::Builder::new())
        .behavior_version(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .endpoint_url(endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
}

/// Points a `payhook` (or bench) process at the test endpoint and `store`'s tables, with the
/// test's generic secret.
pub fn payhook_env<'c>(
    cmd: &'c mut std::process::Command,
    store: &DynamoStore,
) -> &'c mut std::process::Command {
    let t = store.tables();
    cmd.env("AWS_ENDPOINT_URL_DYNAMODB", endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("PAYHOOK_IDEMPOTENCY_TABLE", &t.idempotency)
        .env("PAYHOOK_PAYMENTS_TABLE", &t.payments)
        .env("PAYHOOK_LEDGER_TABLE", &t.ledger)
        .env("PAYHOOK_EVENTS_TABLE", &t.events)
        .env("PAYHOOK_GENERIC_SECRETS", SECRET)
}

pub fn settings() -> StoreSettings {
    StoreSettings::default()
}

/// A store over freshly created, uniquely named tables.
pub async fn store(name: &str) -> DynamoStore {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let tables = TableNames::with_prefix(&unique_prefix(name));
    let client = aws_sdk_dynamodb::Client::from_conf(sdk_builder().build());
    let store = DynamoStore::new(client, tables, settings());
    store.create_tables().await.expect("create tables");
    store_layout(&store, TEST_INDEX_SHARDS).await;
    store
}

/// Index shards of the test tables: the sharding is the same code at any count, and dynalite
/// answers a listing (one query per shard per day) faster with 4 than with the default 32.
pub const TEST_INDEX_SHARDS: u32 = 4;

/// Stores a fresh table's layout directly (`grow_layout` never goes below the defaults).
pub async fn store_layout(store: &DynamoStore, index_shards: u32) {
    use aws_sdk_dynamodb::types::AttributeValue::{N, S};
    store
        .client()
        .put_item()
        .table_name(store.tables().ledger.clone())
        .item("pk", S("#layout".into()))
        .item("sk", S("#layout".into()))
        .item(
            "ledger_shards",
            N(payhook::ledger::Layout::DEFAULT_LEDGER_SHARDS.to_string()),
        )
        .item("index_shards", N(index_shards.to_string()))
        .send()
        .await
        .expect("store the test layout");
}

/// The same tables through a differently configured client (interceptors, faults).
pub fn store_with(base: &DynamoStore, conf: aws_sdk_dynamodb::config::Builder) -> DynamoStore {
    DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(conf.build()),
        base.tables().clone(),
        base.settings(),
    )
}

pub fn config(lease_ms: i64) -> Config {
    Config::from_lookup(|name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(format!("{OTHER_SECRET} {SECRET}")),
        "PAYHOOK_LEASE_MS" => Some(lease_ms.to_string()),
        _ => None,
    })
    .unwrap()
}

pub fn app(store: DynamoStore, lease_ms: i64) -> Arc<App<DynamoStore>> {
    // Metrics off: EMF lines on stdout would only bury the test output.
    let mut app = build_app(&config(lease_ms), store);
    if let Some(a) = Arc::get_mut(&mut app) {
        a.metrics = payhook::metrics::MetricsSink::Off;
    }
    app
}

pub fn now_s() -> i64 {
    payhook::domain::now_ms() / 1000
}

/// A generic payment.succeeded body in the contract's shape.
pub fn payment_body(
    event_id: &str,
    reference: &str,
    account: &str,
    amount: i64,
    currency: &str,
) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","created":1764670000,"data":{{"reference":"{reference}","account":"{account}","amount":{amount},"currency":"{currency}"}}}}"#
    )
}

/// A generic refund.succeeded body: `refund` of `payment`, `amount` NGN minor units.
pub fn refund_body(event_id: &str, refund: &str, payment: &str, amount: i64) -> String {
    event_body(
        event_id,
        "refund.succeeded",
        serde_json::json!({"reference": refund, "payment_reference": payment, "amount": amount, "currency": "NGN"}),
    )
}

pub fn event_body(event_id: &str, kind: &str, data: serde_json::Value) -> String {
    serde_json::json!({"id": event_id, "type": kind, "created": 1764670000, "data": data})
        .to_string()
}

/// A request signed the Standard Webhooks way with `secret` at `ts_s`.
pub fn signed_with(body: &str, secret: &str, ts_s: i64) -> Request<Body> {
    let scheme = StandardWebhooks::from_env_value(secret, 300).unwrap();
    let id = "msg_test";
    Request::post("/webhooks/generic")
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts_s.to_string())
        .header("webhook-signature", scheme.sign(id, ts_s, body.as_bytes()))
        .body(Body::from(body.to_owned()))
        .unwrap()
}

pub fn signed(body: &str) -> Request<Body> {
    signed_with(body, SECRET, now_s())
}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resp {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends a request through the real router (no network).
pub async fn send(app: &Arc<App<DynamoStore>>, req: Request<Body>) -> Resp {
    let res = payhook::http::router(app.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    Resp {
        status,
        replayed,
        retry_after,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// Every item of a table (tests only; the code never scans).
pub async fn scan(
    store: &DynamoStore,
    table: &str,
) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let mut items = Vec::new();
    let mut pages = store
        .client()
        .scan()
        .table_name(table)
        .consistent_read(true)
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        items.push(item.unwrap());
    }
    items
}

/// Item counts of all four tables, to assert "rejected input writes nothing".
pub async fn counts(store: &DynamoStore) -> [usize; 4] {
    let t = store.tables().clone();
    [
        scan(store, &t.idempotency).await.len(),
        scan(store, &t.payments).await.len(),
        // The stored layout is the ledger table's one non-entry item.
        scan(store, &t.ledger)
            .await
            .iter()
            .filter(|i| {
                i.get("pk").and_then(|v| v.as_s().ok()).map(String::as_str) != Some("#layout")
            })
            .count(),
        scan(store, &t.events).await.len(),
    ]
}

/// Makes a refund parked before its payment look as the release before parked debits were
/// written down parked it: nothing on the (then absent) payment, so its credit does not take
/// it and only a redelivery or a replay applies it.
pub async fn as_parked_by_previous_release(store: &DynamoStore, provider: &str, payment: &str) {
    store
        .client()
        .delete_item()
        .table_name(store.tables().payments.clone())
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("{provider}#{payment}")),
        )
        .send()
        .await
        .unwrap();
}

/// A secrets refresh that only counts how often it is asked (each ask is a read of every secret
/// from Secrets Manager in production) and hands back the adapters `config` makes.
pub struct CountingRefresh {
    pub config: payhook::config::Config,
    pub reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl payhook::http::live::Refresh for CountingRefresh {
    fn read(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Option<payhook::providers::Providers>> + Send>,
    > {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (providers, _) = self.config.providers();
        Box::pin(async move { Some(providers) })
    }
}

/// Serves `router` (a fake provider, a front) on a loopback port for the rest of the test: its
/// base URL.
pub async fn serve_fake(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// An app built from `config` on `store`, metrics off, whose payout routes take callers
/// holding `token`.
pub fn payout_app(store: DynamoStore, config: &Config, token: &str) -> Arc<App<DynamoStore>> {
    let mut app = build_app(config, store);
    let a = Arc::get_mut(&mut app).unwrap();
    a.metrics = payhook::metrics::MetricsSink::Off;
    a.payouts = payhook::runtime::payout_service(
        config,
        payhook::http::payouts::PayoutAccess::token(payhook::http::ReadToken::new(token).unwrap()),
    );
    app
}
