//! Stripe events through Amazon EventBridge: the same payment through the webhook door and the
//! EventBridge door at once is credited once; another source is refused and writes nothing; the
//! route is unreachable over HTTP; an event the store could not decide becomes a function error
//! (so Lambda retries it), and `lambda_http` hands EventBridge invocations to the router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use common::{counts, send, store};
use lambda_http::request::RequestContext;
use payhook::cli::client::resign_file;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use serde_json::{json, Value};

const STRIPE: &str = "whsec_payhook_tests_stripe_endpoint_secret";
const SOURCE: &str = "aws.partner/stripe.com/ed_test_61RMtestpayhook";

fn config() -> Config {
    Config::from_lookup(|n| match n {
        "PAYHOOK_STRIPE_SECRETS" => Some(STRIPE.into()),
        "PAYHOOK_STRIPE_EVENT_SOURCE" => Some(SOURCE.into()),
        _ => None,
    })
    .unwrap()
}

fn app(store: DynamoStore) -> Arc<App<DynamoStore>> {
    let mut app = payhook::runtime::build_app(&config(), store);
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    app
}

/// The Stripe sample, signed now: its request and its Stripe event.
fn stripe_sample() -> (Value, Value) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("events/stripe/payment_intent_succeeded.json");
    let event = resign_file(&path, &config()).unwrap();
    let stripe_event: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
    (event, stripe_event)
}

fn webhook(event: &Value) -> Request<Body> {
    let mut r = Request::post("/webhooks/stripe");
    for (k, v) in event["headers"].as_object().unwrap() {
        r = r.header(k.as_str(), v.as_str().unwrap());
    }
    r.body(Body::from(event["body"].as_str().unwrap().to_owned()))
        .unwrap()
}

fn envelope(source: &str, detail: &Value) -> String {
    json!({"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": detail["type"], "source": source, "account": "123456789012",
        "time": "2026-12-03T10:00:00Z", "region": "eu-west-1", "resources": [], "detail": detail})
    .to_string()
}

/// An EventBridge invocation as `lambda_http`'s pass-through hands it to the router.
fn eventbridge(source: &str, detail: &Value) -> Request<Body> {
    let mut req = Request::post("/events")
        .header("content-type", "application/json")
        .body(Body::from(envelope(source, detail)))
        .unwrap();
    req.extensions_mut().insert(RequestContext::PassThrough);
    req
}

async fn usd(store: &DynamoStore) -> (Option<i64>, u64) {
    let b = store
        .balance(&AccountId::parse("wallet_42").unwrap())
        .await
        .unwrap();
    (
        b.balances.get(&Currency::parse("USD").unwrap()).copied(),
        b.entries,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_payment_through_both_doors_at_once_is_credited_once() {
    // GIVEN a team migrating from webhooks to EventBridge: both doors deliver the same event
    let store = store("eventbridge_both").await;
    let app = app(store.clone());
    let (signed, stripe_event) = stripe_sample();
    // WHEN 8 webhook deliveries and 8 EventBridge deliveries arrive together
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (app, req) = if i % 2 == 0 {
            (app.clone(), webhook(&signed))
        } else {
            (app.clone(), eventbridge(SOURCE, &stripe_event))
        };
        tasks.push(tokio::spawn(async move { send(&app, req).await.status }));
    }
    let statuses: Vec<u16> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // THEN every answer is applied, a replay or in flight, and the account is credited once
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 409)),
        "{statuses:?}"
    );
    assert_eq!(usd(&store).await, (Some(4_999), 1));
    // AND a later EventBridge redelivery replays the stored answer
    let again = send(&app, eventbridge(SOURCE, &stripe_event)).await;
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(usd(&store).await, (Some(4_999), 1));
}

#[tokio::test]
async fn another_source_is_refused_and_the_route_is_not_http() {
    let store = store("eventbridge_refused").await;
    let app = app(store.clone());
    let (_, stripe_event) = stripe_sample();
    let before = counts(&store).await;
    let other = send(
        &app,
        eventbridge("aws.partner/stripe.com/ed_someone_else", &stripe_event),
    )
    .await;
    assert_eq!(
        (other.status, other.json()["error"].as_str()),
        (403, Some("source_not_allowed"))
    );
    // Over HTTP (no pass-through context) the route does not exist.
    let mut http = eventbridge(SOURCE, &stripe_event);
    http.extensions_mut().remove::<RequestContext>();
    assert_eq!(send(&app, http).await.status, 404);
    assert_eq!(counts(&store).await, before, "nothing written");
}

#[tokio::test]
async fn an_event_the_store_could_not_decide_is_a_function_error() {
    // GIVEN a store that cannot be reached
    let base = store("eventbridge_down").await;
    let conf = common::sdk_builder()
        .endpoint_url("http://127.0.0.1:9")
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled());
    let down = common::store_with(&base, conf);
    let router = payhook::http::router(app(down));
    let (signed, stripe_event) = stripe_sample();
    // WHEN an EventBridge event arrives: the invocation fails, so Lambda retries it
    let mut req = Request::post("/events")
        .body(lambda_http::Body::from(envelope(SOURCE, &stripe_event)))
        .unwrap();
    req.extensions_mut().insert(RequestContext::PassThrough);
    let out = payhook::http::events::lambda_call(router.clone(), req).await;
    assert!(
        out.is_err(),
        "a 5xx EventBridge event must fail the invocation"
    );
    // AND an HTTP delivery keeps its 503 answer (API Gateway passes it to the provider)
    let mut web = Request::post("/webhooks/stripe");
    for (k, v) in signed["headers"].as_object().unwrap() {
        web = web.header(k.as_str(), v.as_str().unwrap());
    }
    let web = web
        .body(lambda_http::Body::from(
            signed["body"].as_str().unwrap().to_owned(),
        ))
        .unwrap();
    let res = payhook::http::events::lambda_call(router, web)
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 503);
}

#[test]
fn lambda_http_hands_an_eventbridge_invocation_to_the_router() {
    let (_, stripe_event) = stripe_sample();
    let envelope = json!({"version": "0", "id": "1", "detail-type": "payment_intent.succeeded",
        "source": SOURCE, "account": "123456789012", "time": "2026-12-03T10:00:00Z",
        "region": "eu-west-1", "resources": [], "detail": stripe_event});
    let parsed: lambda_http::request::LambdaRequest =
        serde_json::from_str(&envelope.to_string()).unwrap();
    let req: lambda_http::Request = parsed.into();
    assert_eq!(req.uri().path(), payhook::http::events::PATH);
    assert!(matches!(
        req.extensions().get::<RequestContext>(),
        Some(RequestContext::PassThrough)
    ));
}
