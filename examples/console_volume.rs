//! The console at volume, for #33: loads `DELIVERIES` (default 100,000) synthetic deliveries
//! spread over the last 24 hours into fresh tables (named `PAYHOOK_*_TABLE`, or `cvol-{pid}-…`),
//! then times each console page through its router, in process: the first load (which counts
//! and stores the closed minutes' rollups), then `RUNS` more. Prints JSON (p50 and p95 in ms per
//! page) on stdout, progress on stderr. A benchmark, not a test: run it on a quiet machine.
//!
//!   AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8123 DELIVERIES=100000 \
//!     cargo run --release --example console_volume

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use futures::StreamExt;
use payhook::console::source::StoreSource;
use payhook::console::{router, Console};
use payhook::domain::{AccountId, Currency, IdempotencyKey, Money, ProviderId, Reference};
use payhook::dynamodb::{DynamoStore, TableNames};
use payhook::eventlog::{Delivery, Details, EventLog, Outcome};
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:9";
const ACCESS: &str = "access-token-of-the-console-volume-bench-000000";

fn main() -> std::process::ExitCode {
    match payhook::runtime::tokio_runtime() {
        Ok(rt) => rt.block_on(bench()),
        Err(e) => {
            eprintln!("console_volume: tokio runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn var(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn bench() -> std::process::ExitCode {
    let (n, runs) = (var("DELIVERIES", 100_000), var("RUNS", 20));
    let config = match payhook::config::Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("console_volume: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let base = payhook::runtime::dynamo_store(&config).await;
    let prefix = format!("cvol-{}-", std::process::id());
    let store = DynamoStore::new(
        base.client().clone(),
        TableNames::with_prefix(&prefix),
        config.store,
    );
    if let Err(e) = store.create_tables().await {
        eprintln!("console_volume: create tables: {e}");
        return std::process::ExitCode::FAILURE;
    }
    eprintln!("loading {n} deliveries into {prefix}*");
    let started = Instant::now();
    if let Err(e) = load(&store, n).await {
        eprintln!("console_volume: load: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let load_s = started.elapsed().as_secs_f64();
    eprintln!("loaded in {load_s:.1} s");
    let console = Arc::new(Console {
        source: StoreSource {
            store: store.clone(),
            label: "bench".into(),
        },
        // As `payhook console` runs on the store: with replay (and the traffic page's money).
        replay: payhook::runtime::ops(&config, store.clone()).ok(),
        csrf: "csrf".into(),
        origin: format!("http://{HOST}"),
        lease_ms: 30_000,
        pending_after_ms: 900_000,
        payout_unresolved_after_ms: 3_600_000,
        operator: "console:bench".into(),
        access: ACCESS.into(),
        done: Default::default(),
    });
    let pages = [
        "/deliveries",
        "/deliveries?outcome=parked&since=24h",
        "/traffic?window=hour",
        "/traffic?window=day",
        "/attention",
    ];
    let mut result = serde_json::Map::new();
    for path in pages {
        let mut times = Vec::with_capacity(runs);
        let first = timed(&console, path).await;
        for _ in 0..runs {
            times.push(timed(&console, path).await);
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        eprintln!(
            "{path}: first {first:.0} ms, p50 {:.1} ms, p95 {:.1} ms",
            at(0.5),
            at(0.95)
        );
        result.insert(
            path.to_owned(),
            serde_json::json!({"first_ms": first, "p50_ms": at(0.5), "p95_ms": at(0.95)}),
        );
    }
    println!(
        "{}",
        serde_json::json!({"deliveries": n, "runs": runs, "load_s": load_s, "pages": result})
    );
    std::process::ExitCode::SUCCESS
}

/// `n` deliveries over the last 24 hours: mostly applied and replayed, a few of each outcome
/// someone acts on, three providers.
async fn load(store: &DynamoStore, n: usize) -> Result<(), payhook::store::StoreError> {
    let now = payhook::domain::now_ms();
    let step = 86_000_000 / i64::try_from(n.max(1)).unwrap_or(1);
    let providers = [
        ProviderId::GENERIC,
        ProviderId::STRIPE,
        ProviderId::PAYSTACK,
    ];
    let outcomes = [
        Outcome::Applied,
        Outcome::Replayed,
        Outcome::Applied,
        Outcome::Replayed,
        Outcome::Ignored,
        Outcome::Parked,
    ];
    let mut done = 0usize;
    let mut writes = futures::stream::iter(0..n)
        .map(|i| {
            let at = now - 86_000_000 + step * i64::try_from(i).unwrap_or(0);
            let provider = providers[i % providers.len()];
            let outcome = outcomes[i % outcomes.len()];
            let reference = format!("ord_{}", i / 2);
            let d = Delivery {
                id: Delivery::new_id(at),
                provider,
                event_id: format!("evt_{i}"),
                event_type: "payment.succeeded".into(),
                key: Some(IdempotencyKey::from_stored(format!(
                    "{provider}:payment:{reference}"
                ))),
                reference: Reference::parse(&reference).ok(),
                outcome,
                http_status: if outcome == Outcome::Parked { 409 } else { 200 },
                received_at_ms: at,
                raw_body: Some(format!(r#"{{"id":"evt_{i}","amount":{i}}}"#)),
                replay_of: None,
                started_by: None,
                redriven: None,
                // What a real delivery logs: its amount, account, order id and answer.
                details: Details {
                    money: Currency::parse("NGN")
                        .and_then(|c| Money::new(100 + i64::try_from(i).unwrap_or(0), c))
                        .ok(),
                    account: AccountId::parse(&format!("wallet_{}", i % 500)).ok(),
                    order_id: Some(format!("order_{}", i / 2)),
                    answer: Some(format!(
                        r#"{{"status":"applied","key":"{provider}:payment:{reference}"}}"#
                    )),
                    headers: Vec::new(),
                },
            };
            async move { store.append(&d).await }
        })
        .buffer_unordered(32);
    while let Some(r) = writes.next().await {
        r?;
        done += 1;
        if done % 10_000 == 0 {
            eprintln!("  {done}");
        }
    }
    Ok(())
}

async fn timed(console: &Arc<Console<StoreSource<DynamoStore>>>, path: &str) -> f64 {
    let req = Request::get(path)
        .header("host", HOST)
        .header("cookie", format!("payhook_console_9={ACCESS}"))
        .body(Body::empty());
    let Ok(req) = req else {
        return f64::NAN;
    };
    let started = Instant::now();
    let status = match router(console.clone()).oneshot(req).await {
        Ok(res) => {
            let status = res.status();
            let _ = axum::body::to_bytes(res.into_body(), usize::MAX).await;
            status
        }
        Err(e) => match e {},
    };
    let ms = started.elapsed().as_secs_f64() * 1_000.0;
    if !status.is_success() {
        eprintln!("  {path}: {status}");
    }
    ms
}
