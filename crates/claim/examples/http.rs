//! An HTTP service that charges each order once, however often its client retries: `POST
//! /charges` behind the `Idempotency-Key` layer ([`dynamo_claim::http`]), answering the charge
//! record (`{"charge":"ch_N","amount_minor":…,"memo":…}`, the request's `memo` verbatim), and
//! `GET /charges` answering how many charges ran (`{"charges":N}`, not behind the layer). One
//! axum router, served on `ADDR` or, inside Lambda (`AWS_LAMBDA_RUNTIME_API` set), under
//! `lambda_http`.
//!
//! ```text
//! cargo run -p dynamo-claim --example http -- --create-table
//! curl -si localhost:3000/charges -H 'idempotency-key: k1' -H 'x-tenant: t1' \
//!     -d '{"amount_minor":500,"memo":"order 1"}'
//! ```
//!
//! | variable | what |
//! |---|---|
//! | `CLAIMS_TABLE` | the claim table (`claims`); `--create-table` creates it, then serves |
//! | `AWS_ENDPOINT_URL_DYNAMODB` | dynalite or DynamoDB Local, read by the SDK's own configuration |
//! | `CLAIM_LEASE_MS` | a claim's lease (60000): how long a crashed attempt holds its key |
//! | `ADDR` | where to listen (`127.0.0.1:3000`); the first line on stdout is `listening on http://ADDR` |
//!
//! The caller is the `x-tenant` header. It stands in for an authenticated caller: behind an
//! authorizer, scope by the principal it vouches for, never by a header a client can choose.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use dynamo_claim::http::{IdempotencyKeyLayer, NothingHappened};
use dynamo_claim::{Attempt, ClaimTable};

/// How many charges ran: what a test compares with how many requests it sent.
type Charges = Arc<AtomicU64>;

#[derive(serde::Deserialize)]
struct Order {
    amount_minor: i64,
    #[serde(default)]
    memo: serde_json::Value,
}

/// The service: `POST /charges` behind the layer, `GET /charges` beside it.
pub fn app(table: ClaimTable, lease_ms: i64) -> Router {
    let charges = Charges::default();
    let once = IdempotencyKeyLayer::new(table, tenant)
        .lease_ms(lease_ms)
        .prefix("charges");
    Router::new()
        .route("/charges", post(charge).layer(once).get(count))
        .with_state(charges)
}

/// The caller a key belongs to (see the module's docs: a stand-in for an authenticated one).
fn tenant(parts: &Parts) -> String {
    parts
        .headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The effect (a payment provider's API in a real service). A body that is not an order is
/// refused before any effect, and says so: its claim is released. A real charge after a
/// takeover (`attempt.took_over`) sends the key on as the provider's own idempotency key, so
/// the provider answers a repeat with the first charge.
async fn charge(
    State(charges): State<Charges>,
    Extension(attempt): Extension<Attempt>,
    body: Bytes,
) -> Response {
    let order: Order = match serde_json::from_slice(&body) {
        Ok(order) => order,
        Err(e) => {
            let mut refused =
                (StatusCode::BAD_REQUEST, format!("not an order: {e}")).into_response();
            refused.extensions_mut().insert(NothingHappened);
            return refused;
        }
    };
    let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
    tracing::info!(
        n,
        amount_minor = order.amount_minor,
        took_over = attempt.took_over,
        "charging"
    );
    let record = serde_json::json!({
        "charge": format!("ch_{n}"),
        "amount_minor": order.amount_minor,
        "memo": order.memo,
    });
    let attempt = if attempt.took_over {
        "took-over"
    } else {
        "fresh"
    };
    (
        StatusCode::CREATED,
        [
            (CONTENT_TYPE, "application/json"),
            (
                axum::http::HeaderName::from_static("x-charge-attempt"),
                attempt,
            ),
        ],
        record.to_string(),
    )
        .into_response()
}

async fn count(State(charges): State<Charges>) -> impl IntoResponse {
    let n = charges.load(Ordering::SeqCst);
    (
        [(CONTENT_TYPE, "application/json")],
        format!("{{\"charges\":{n}}}"),
    )
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    let name = std::env::var("CLAIMS_TABLE").unwrap_or_else(|_| "claims".to_owned());
    let table = ClaimTable::new(&client, name);
    if std::env::args().any(|a| a == "--create-table") {
        table.create_if_missing().await?;
    }
    let lease_ms = match std::env::var("CLAIM_LEASE_MS") {
        Ok(ms) => ms.parse()?,
        Err(_) => 60_000,
    };
    let app = app(table, lease_ms);
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        return lambda_http::run(app).await;
    }
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
