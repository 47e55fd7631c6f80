//! The console at volume, for #33: loads `DELIVERIES` (default 100,000) synthetic deliveries
//! spread over the last 24 hours into fresh tables (named `PAYHOOK_*_TABLE`, or `cvol-{pid}-…`),
//! times `/deliveries` once cold, runs the console's start-up warm-up (rollups), then times each
//! console page through its router, in process: the first load, then `RUNS` more, and the bulk
//! dry run of the 1,000 newest parked deliveries through the replay form. Prints JSON (p50 and
//! p95 in ms per page) on stdout, progress on stderr. A benchmark, not a test: run it on a
//! quiet machine, with a generic secret set (the dry run maps the parked bodies).
//!
//!   AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8123 DELIVERIES=100000 \
//!     PAYHOOK_GENERIC_SECRETS=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw \
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
    // What an operator meets before the start-up warm-up has run, then the warm-up itself
    // (`payhook console` runs it in the background when it starts).
    let cold = timed(&console, "/deliveries").await;
    let started = Instant::now();
    let warmed = match payhook::runtime::ops(&config, store.clone()) {
        Ok(ops) => {
            let now = payhook::domain::now_ms();
            let window = (now - payhook::http::read::MAX_WINDOW_MS, now, now);
            payhook::read::warm_rollups(&store, &ops.providers, window, 20).await
        }
        Err(e) => Err(payhook::read::ReadError::invalid("config", e.to_string())),
    };
    let warm_ms = started.elapsed().as_secs_f64() * 1_000.0;
    eprintln!("cold /deliveries {cold:.0} ms; warm-up {warm_ms:.0} ms: {warmed:?}");
    result.insert(
        "cold /deliveries, before the warm-up".to_owned(),
        serde_json::json!({"ms": cold}),
    );
    result.insert(
        "warm-up (7 days of rollups)".to_owned(),
        serde_json::json!({"ms": warm_ms}),
    );
    // A search by merchant order id (an exact index lookup) and a delivery's own page.
    let order = format!("/search?q=order_{}", n / 3);
    let pages: Vec<&str> = pages.into_iter().chain([order.as_str()]).collect();
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
    // The bulk dry run of the 1,000 newest parked deliveries (a window that holds that many):
    // each judged by the pipeline's own code over a read-only store.
    let step = 86_000_000 / i64::try_from(n.max(1)).unwrap_or(1);
    let now = payhook::domain::now_ms();
    let form = format!(
        "csrf=csrf&step=preview&outcome=parked&since_ms={}&until_ms={}",
        now - 1_000 * 6 * step,
        now + 1
    );
    let mut times = Vec::new();
    for _ in 0..runs.clamp(1, 5) {
        times.push(timed_post(&console, &form).await);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    eprintln!(
        "dry run of 1,000 parked: p50 {:.0} ms, p95 {:.0} ms",
        at(0.5),
        at(0.95)
    );
    result.insert(
        "POST /replay (dry run, 1,000 parked)".to_owned(),
        serde_json::json!({"p50_ms": at(0.5), "p95_ms": at(0.95), "runs": times.len()}),
    );
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
            let outcome = outcomes[i % outcomes.len()];
            // Parked ones are genuine generic refunds of payments never seen, so the bulk dry
            // run below judges real bodies (each reads its claim, payment and binding).
            let provider = if outcome == Outcome::Parked {
                ProviderId::GENERIC
            } else {
                providers[i % providers.len()]
            };
            let reference = format!("ord_{}", i / 2);
            let parked_body = format!(
                r#"{{"id":"evt_{i}","type":"refund.succeeded","created":1764670000,"data":{{"reference":"rfd_{i}","payment_reference":"{reference}","amount":100,"currency":"NGN"}}}}"#
            );
            let d = Delivery {
                id: Delivery::new_id(at),
                provider,
                event_id: format!("evt_{i}"),
                event_type: if outcome == Outcome::Parked {
                    "refund.succeeded".into()
                } else {
                    "payment.succeeded".into()
                },
                key: Some(IdempotencyKey::from_stored(if outcome == Outcome::Parked {
                    format!("{provider}:refund:rfd_{i}")
                } else {
                    format!("{provider}:payment:{reference}")
                })),
                reference: Reference::parse(&reference).ok(),
                outcome,
                http_status: if outcome == Outcome::Parked { 409 } else { 200 },
                received_at_ms: at,
                raw_body: Some(if outcome == Outcome::Parked {
                    parked_body
                } else {
                    format!(r#"{{"id":"evt_{i}","amount":{i}}}"#)
                }),
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

/// A dry run through the console's form, timed; checks it judged 1,000 deliveries.
async fn timed_post(console: &Arc<Console<StoreSource<DynamoStore>>>, form: &str) -> f64 {
    let req = Request::post("/replay")
        .header("host", HOST)
        .header("origin", format!("http://{HOST}"))
        .header("cookie", format!("payhook_console_9={ACCESS}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(form.to_owned()));
    let Ok(req) = req else {
        return f64::NAN;
    };
    let started = Instant::now();
    let Ok(res) = router(console.clone()).oneshot(req).await;
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let ms = started.elapsed().as_secs_f64() * 1_000.0;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() || !text.contains("parked") {
        eprintln!("  dry run: {status}");
    }
    ms
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
