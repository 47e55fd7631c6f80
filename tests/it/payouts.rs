//! Payouts end to end: `POST /payouts` through the real router and pipeline, against dynalite
//! and a fake transfer API on loopback (the generic provider's documented contract), with the
//! settlement webhooks signed as the generic provider signs them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::Request;
use common::faults::{invoke, Fault, FaultInjector, Invocation};
use common::*;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, ProviderId};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::DynamoStore;
use payhook::http::payouts::PayoutAccess;
use payhook::http::{App, ReadToken};
use payhook::ledger::Ledger;
use payhook::payouts::{PayoutId, PayoutRequest, Payouts, RequestKey};
use payhook::pipeline::{PayoutCall, Pipeline};
use payhook::providers::Providers;
use payhook::reconcile::{HttpProviderApi, ReconcileSettings, Reconciler};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "payout-token-for-the-tests-0123456789";
const OTHER_TOKEN: &str = "another-callers-payout-token-987654321";
/// Short, for the tests about takeovers (crashes, leases expiring), and still long enough for
/// one call (`PROVIDER_TIMEOUT_MS`) with the store clock's second, the second after it, and a
/// loaded machine's writes before it: a request never starts a call its lease would not
/// outlast. Every other test runs with [`LONG_LEASE_MS`].
const LEASE_MS: i64 = 4_000;
const PROVIDER_TIMEOUT_MS: i64 = 300;
/// The fake documents that a transfer it took is visible to a lookup at once; half a second
/// for good measure (recorded on each send).
const VISIBILITY_MS: i64 = 500;
/// Longer than any attempt here takes, for tests about duplicates meeting a claim in flight
/// (a 300 ms lease can expire mid-attempt on two loaded cores, and is below the store clock's
/// one-second resolution, so a duplicate would take the claim over instead).
const LONG_LEASE_MS: i64 = 30_000;

/// How the fake answers a new transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pending,
    Success,
    Failed,
    /// Takes the transfer, then answers after the client gave up.
    TimeoutAfterAccepting,
    /// Answers 503 without taking it.
    Unavailable,
    /// Takes the transfer and answers (pending) after 3 s.
    Slow,
}

#[derive(Default)]
struct Fake {
    mode: Option<Mode>,
    transfers: HashMap<String, String>,
    posts: HashMap<String, usize>,
    gets: usize,
}

type Shared = Arc<Mutex<Fake>>;

async fn create_transfer(
    State(fake): State<Shared>,
    body: String,
) -> (axum::http::StatusCode, String) {
    let v: Value = serde_json::from_str(&body).unwrap();
    let reference = v["reference"].as_str().unwrap().to_owned();
    let (mode, status) = {
        let mut f = fake.lock().unwrap();
        *f.posts.entry(reference.clone()).or_insert(0) += 1;
        let mode = f.mode.unwrap_or(Mode::Pending);
        let word = match mode {
            Mode::Success => "success",
            Mode::Failed => "failed",
            _ => "pending",
        };
        if mode == Mode::Unavailable {
            return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "{}".into());
        }
        // The provider's own idempotency: one transfer per reference.
        let status = f
            .transfers
            .entry(reference.clone())
            .or_insert_with(|| word.to_owned())
            .clone();
        (mode, status)
    };
    if mode == Mode::TimeoutAfterAccepting {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    if mode == Mode::Slow {
        tokio::time::sleep(Duration::from_millis(3_000)).await;
    }
    (
        axum::http::StatusCode::OK,
        json!({"reference": reference, "status": status}).to_string(),
    )
}

async fn get_transfer(
    State(fake): State<Shared>,
    Path(reference): Path<String>,
) -> (axum::http::StatusCode, String) {
    let mut f = fake.lock().unwrap();
    f.gets += 1;
    match f.transfers.get(&reference) {
        Some(status) => (
            axum::http::StatusCode::OK,
            json!({"reference": reference, "status": status}).to_string(),
        ),
        None => (axum::http::StatusCode::NOT_FOUND, "{}".into()),
    }
}

async fn fake_transfers() -> (String, Shared) {
    let fake: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/transfers", axum::routing::post(create_transfer))
        .route("/transfers/{reference}", axum::routing::get(get_transfer))
        .with_state(fake.clone());
    (serve_fake(app).await, fake)
}

fn payout_config(api_url: &str) -> Config {
    payout_config_with_lease(api_url, LEASE_MS)
}

fn payout_config_with_lease(api_url: &str, lease_ms: i64) -> Config {
    let api_url = api_url.to_owned();
    Config::from_lookup(move |name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
        "PAYHOOK_GENERIC_API_URL" => Some(api_url.clone()),
        "PAYHOOK_GENERIC_API_KEY" => Some("k_test".into()),
        "PAYHOOK_LEASE_MS" => Some(lease_ms.to_string()),
        "PAYHOOK_PROVIDER_TIMEOUT_MS" => Some(PROVIDER_TIMEOUT_MS.to_string()),
        "PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS" => Some(VISIBILITY_MS.to_string()),
        "PAYHOOK_PAYOUT_MAX_MINOR" => Some("1000000".into()),
        _ => None,
    })
    .unwrap()
}

fn payout_app(store: DynamoStore, api_url: &str) -> Arc<App<DynamoStore>> {
    payout_app_with_lease(store, api_url, LONG_LEASE_MS)
}

fn payout_app_with_lease(
    store: DynamoStore,
    api_url: &str,
    lease_ms: i64,
) -> Arc<App<DynamoStore>> {
    let config = payout_config_with_lease(api_url, lease_ms);
    let mut app = payhook::runtime::build_app(&config, store);
    let a = Arc::get_mut(&mut app).unwrap();
    a.metrics = payhook::metrics::MetricsSink::Off;
    a.payouts = payhook::runtime::payout_service(
        &config,
        PayoutAccess::token(ReadToken::new(TOKEN).unwrap()),
    );
    app
}

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

async fn balance(store: &DynamoStore, account: &str) -> i64 {
    let b = store
        .balance(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    b.balances.get(&ngn()).copied().unwrap_or(0)
}

/// Credits `account` with `amount` NGN through a signed webhook.
async fn fund(app: &Arc<App<DynamoStore>>, account: &str, amount: i64, reference: &str) {
    let body = payment_body(
        &format!("evt_{reference}"),
        reference,
        account,
        amount,
        "NGN",
    );
    assert_eq!(send(app, signed(&body)).await.status, 200);
}

fn payout_body(account: &str, amount: i64) -> String {
    json!({"provider": "generic", "account": account, "amount": amount, "currency": "NGN",
           "destination": {"bank": "058", "account_number": "0123456789"}, "narration": "payout"})
    .to_string()
}

fn payout_request(key: &str, body: &str, token: Option<&str>) -> Request<Body> {
    let mut r = Request::post("/payouts").header("content-type", "application/json");
    if !key.is_empty() {
        r = r.header("idempotency-key", key);
    }
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r.body(Body::from(body.to_owned())).unwrap()
}

/// A response with the payout headers.
struct PayoutResp {
    status: u16,
    replayed: bool,
    payout_status: Option<String>,
    body: Value,
}

async fn pay(app: &Arc<App<DynamoStore>>, req: Request<Body>) -> PayoutResp {
    let res = payhook::http::router(app.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = res.status().as_u16();
    let (replayed, payout_status) = {
        let header = |n: &str| {
            res.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        (
            header("idempotent-replayed").as_deref() == Some("true"),
            header("payout-status"),
        )
    };
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    PayoutResp {
        status,
        replayed,
        payout_status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn posts(fake: &Shared) -> usize {
    fake.lock().unwrap().posts.values().sum()
}

async fn payout_items(store: &DynamoStore) -> usize {
    scan(store, &store.tables().payments.clone())
        .await
        .iter()
        .filter(|i| {
            i.get("pk")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|pk| pk.starts_with("payout#"))
        })
        .count()
}

fn transfer_webhook(kind: &str, payout: &str, n: usize) -> String {
    event_body(
        &format!("evt_{kind}_{n}"),
        kind,
        json!({"reference": payout, "amount": 100, "currency": "NGN"}),
    )
}

#[tokio::test]
async fn fifty_concurrent_payouts_against_one_thousand_reserve_exactly_ten() {
    // GIVEN an account holding 1,000 NGN (minor units)
    let store = store("payouts_fifty").await;
    let (url, fake) = fake_transfers().await;
    // Fifty decisions queue on one account's guard: a lease long enough that the last reserved
    // still has time to send (a short one would leave it reserved for the next look).
    let app = payout_app_with_lease(store.clone(), &url, LONG_LEASE_MS);
    fund(&app, "wallet_1", 1_000, "pay_fund").await;
    // WHEN 50 payouts of 100 arrive at once, each under its own key
    let tasks = (0..50).map(|i| {
        let app = app.clone();
        tokio::spawn(async move {
            pay(
                &app,
                payout_request(&format!("k{i}"), &payout_body("wallet_1", 100), Some(TOKEN)),
            )
            .await
        })
    });
    let answers: Vec<PayoutResp> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // THEN exactly ten are reserved and sent, the rest refused, and the balance is 0
    let created = answers.iter().filter(|a| a.status == 201).count();
    let refused = answers
        .iter()
        .filter(|a| a.status == 422 && a.body["error"] == "insufficient_funds")
        .count();
    assert_eq!(
        (created, refused),
        (10, 40),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert_eq!(balance(&store, "wallet_1").await, 0);
    assert_eq!(posts(&fake), 10, "one transfer per reserved payout");
    // AND a refusal is the key's final answer
    let refused_key = (0..50).find(|i| answers[*i].status == 422).unwrap();
    let again = pay(
        &app,
        payout_request(
            &format!("k{refused_key}"),
            &payout_body("wallet_1", 100),
            Some(TOKEN),
        ),
    )
    .await;
    assert_eq!((again.status, again.replayed), (422, true));
}

#[tokio::test]
async fn one_key_sent_twenty_times_at_once_makes_one_transfer() {
    let store = store("payouts_one_key").await;
    let (url, fake) = fake_transfers().await;
    // A lease no attempt outlives: every duplicate meets the claim in flight (409) or done.
    let app = payout_app_with_lease(store.clone(), &url, LONG_LEASE_MS);
    fund(&app, "wallet_2", 1_000, "pay_fund2").await;
    let tasks = (0..20).map(|_| {
        let app = app.clone();
        tokio::spawn(async move {
            pay(
                &app,
                payout_request("same-key", &payout_body("wallet_2", 300), Some(TOKEN)),
            )
            .await
        })
    });
    let answers: Vec<PayoutResp> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        answers.iter().all(|a| matches!(a.status, 201 | 409)),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert_eq!(
        answers
            .iter()
            .filter(|a| a.status == 201 && !a.replayed)
            .count(),
        1
    );
    assert_eq!(posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_2").await, 700);
    // A later retry replays the stored answer, with the status now.
    let again = pay(
        &app,
        payout_request("same-key", &payout_body("wallet_2", 300), Some(TOKEN)),
    )
    .await;
    assert_eq!(
        (again.status, again.replayed, again.payout_status.as_deref()),
        (201, true, Some("sent"))
    );
    assert_eq!(again.body["status"], "sent");
    assert_eq!(posts(&fake), 1);
}

#[tokio::test]
async fn one_key_twenty_times_with_leases_expiring_mid_attempt_still_makes_one_transfer() {
    // GIVEN a short lease, so duplicates may take the claim over from attempts that stall
    let store = store("payouts_one_key_takeover").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app_with_lease(store.clone(), &url, LEASE_MS);
    fund(&app, "wallet_2t", 1_000, "pay_fund2t").await;
    // WHEN one key is sent twenty times at once
    let tasks = (0..20).map(|_| {
        let app = app.clone();
        tokio::spawn(async move {
            pay(
                &app,
                payout_request("same-key-t", &payout_body("wallet_2t", 300), Some(TOKEN)),
            )
            .await
        })
    });
    let answers: Vec<PayoutResp> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // THEN whoever held the claim, the money moved once: one transfer, one reservation
    assert!(
        answers.iter().all(|a| matches!(a.status, 201 | 409)),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert_eq!(posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_2t").await, 700);
    // AND every answer that names the payout names the same one
    let payouts: std::collections::BTreeSet<String> = answers
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| a.body["payout"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(payouts.len(), 1, "{payouts:?}");
}

#[tokio::test]
async fn a_timeout_after_the_provider_accepted_is_asked_about_never_resent() {
    let store = store("payouts_timeout").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_3", 1_000, "pay_fund3").await;
    fake.lock().unwrap().mode = Some(Mode::TimeoutAfterAccepting);
    // WHEN the provider takes the transfer but answers too late
    let first = pay(
        &app,
        payout_request("t1", &payout_body("wallet_3", 250), Some(TOKEN)),
    )
    .await;
    // THEN the payout is sent and ambiguous: 202
    assert_eq!(
        (first.status, first.body["status"].as_str()),
        (202, Some("sent"))
    );
    assert_eq!(balance(&store, "wallet_3").await, 750);
    // WHEN the provider settles it and the caller retries the key
    let payout = first.body["payout"].as_str().unwrap().to_owned();
    fake.lock()
        .unwrap()
        .transfers
        .insert(payout.clone(), "success".into());
    let retry = pay(
        &app,
        payout_request("t1", &payout_body("wallet_3", 250), Some(TOKEN)),
    )
    .await;
    // THEN a retry while the call may still run calls nobody: still sent, unresolved
    assert_eq!(
        (retry.status, retry.replayed, retry.payout_status.as_deref()),
        (202, true, Some("sent"))
    );
    assert_eq!((posts(&fake), fake.lock().unwrap().gets), (1, 0));
    // AND one after the call's fence asks, sends nothing more, and knows it is paid: the body
    // and Payout-Status tell one story
    tokio::time::sleep(Duration::from_millis(fence_ms())).await;
    let retry = pay(
        &app,
        payout_request("t1", &payout_body("wallet_3", 250), Some(TOKEN)),
    )
    .await;
    assert_eq!(
        (
            retry.status,
            retry.replayed,
            retry.payout_status.as_deref(),
            retry.body["status"].as_str()
        ),
        (201, true, Some("paid"), Some("paid"))
    );
    assert_eq!((posts(&fake), fake.lock().unwrap().gets), (1, 1));
    assert_eq!(balance(&store, "wallet_3").await, 750);
}

#[tokio::test]
async fn a_send_that_never_arrived_is_resent_under_the_same_reference_once_asked() {
    let store = store("payouts_unavailable").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_4", 500, "pay_fund4").await;
    fake.lock().unwrap().mode = Some(Mode::Unavailable);
    let first = pay(
        &app,
        payout_request("u1", &payout_body("wallet_4", 200), Some(TOKEN)),
    )
    .await;
    assert_eq!(first.status, 202);
    let payout = first.body["payout"].as_str().unwrap().to_owned();
    fake.lock().unwrap().mode = Some(Mode::Success);
    // Reconciliation inside the call's fence calls nobody.
    let report = reconcile(&store, &url).await;
    assert_eq!(report.completed.len(), 0, "{report:?}");
    assert_eq!((posts(&fake), fake.lock().unwrap().gets), (1, 0));
    // Past the fence and the visibility window it asks (404: never arrived) and sends again
    // under the same reference.
    tokio::time::sleep(Duration::from_millis(fence_ms() + VISIBILITY_MS as u64)).await;
    let report = reconcile(&store, &url).await;
    assert_eq!(report.completed.len(), 1, "{report:?}");
    let (sends, transfers) = {
        let f = fake.lock().unwrap();
        (f.posts.get(&payout).copied(), f.transfers.len())
    };
    assert_eq!(sends, Some(2), "the same reference twice, one transfer");
    assert_eq!(transfers, 1);
    let record = store
        .payout(&PayoutId::parse(&payout).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status.as_str(), "paid");
    assert_eq!(balance(&store, "wallet_4").await, 300);
}

/// How long a call's fence holds: its bound, the store clock's margin, and a second more for
/// the clock's resolution (the fence is judged on DynamoDB's whole-second time).
fn fence_ms() -> u64 {
    (PROVIDER_TIMEOUT_MS + payhook::payouts::calls::CALL_MARGIN_MS + 1_000) as u64
}

async fn reconcile(store: &DynamoStore, url: &str) -> payhook::reconcile::Report {
    let config = payout_config(url);
    let api = HttpProviderApi::new(config.api_endpoints.clone())
        .unwrap()
        .with_timeout(Duration::from_millis(300))
        .with_generic_visibility_ms(config.generic_transfer_visibility_ms);
    let pipeline = Pipeline::new(store.clone());
    let providers = Providers::default();
    Reconciler {
        pipeline: &pipeline,
        providers: &providers,
        api: &api,
        settings: ReconcileSettings {
            pending_after_ms: 0,
            lease_ms: 5_000,
            call_timeout_ms: 300,
            budget_ms: 20_000,
            ..ReconcileSettings::default()
        },
    }
    .run()
    .await
    .unwrap()
}

#[tokio::test]
async fn settlement_words_converge_in_any_order_and_move_money_once_each() {
    let store = store("payouts_settle").await;
    let (url, _fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_5", 1_000, "pay_fund5").await;
    let new = |key: &'static str| {
        let app = app.clone();
        async move {
            pay(
                &app,
                payout_request(key, &payout_body("wallet_5", 100), Some(TOKEN)),
            )
            .await
        }
    };
    // A failed transfer is credited back once, however often the webhook comes.
    let a = new("s1").await.body["payout"].as_str().unwrap().to_owned();
    assert_eq!(balance(&store, "wallet_5").await, 900);
    for n in 0..3 {
        let r = send(&app, signed(&transfer_webhook("transfer.failed", &a, n))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(balance(&store, "wallet_5").await, 1_000);
    // A success after the failure follows the provider: paid, debited again once.
    for n in 0..2 {
        send(&app, signed(&transfer_webhook("transfer.succeeded", &a, n))).await;
    }
    assert_eq!(balance(&store, "wallet_5").await, 900);
    // A reversal after the success credits back once.
    for n in 0..2 {
        send(&app, signed(&transfer_webhook("transfer.reversed", &a, n))).await;
    }
    assert_eq!(balance(&store, "wallet_5").await, 1_000);
    // A late failure changes nothing.
    send(&app, signed(&transfer_webhook("transfer.failed", &a, 9))).await;
    assert_eq!(balance(&store, "wallet_5").await, 1_000);
    let rec = store
        .payout(&PayoutId::parse(&a).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.status.as_str(), "reversed");

    // Reversal after success (the ordinary way round).
    let b = new("s2").await.body["payout"].as_str().unwrap().to_owned();
    send(&app, signed(&transfer_webhook("transfer.succeeded", &b, 0))).await;
    assert_eq!(balance(&store, "wallet_5").await, 900);
    send(&app, signed(&transfer_webhook("transfer.reversed", &b, 0))).await;
    send(&app, signed(&transfer_webhook("transfer.reversed", &b, 1))).await;
    assert_eq!(balance(&store, "wallet_5").await, 1_000);

    // The ledger holds exactly the entries of those words.
    let entries = store
        .entries(&AccountId::parse("wallet_5").unwrap())
        .await
        .unwrap();
    let keys: Vec<String> = entries.iter().map(|p| p.key.to_string()).collect();
    for op in ["payout", "payout_failed", "payout_paid", "payout_reversed"] {
        assert_eq!(
            keys.iter()
                .filter(|k| k.as_str() == format!("generic:{op}:{a}"))
                .count(),
            1,
            "{op}"
        );
    }
    assert_eq!(keys.iter().filter(|k| k.contains(&b)).count(), 2);
}

#[tokio::test]
async fn keys_are_the_callers_and_refusals_write_nothing() {
    let store = store("payouts_callers").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_6", 1_000, "pay_fund6").await;
    // Missing or wrong token: 401 / 403, nothing written.
    assert_eq!(
        pay(
            &app,
            payout_request("x", &payout_body("wallet_6", 100), None)
        )
        .await
        .status,
        401
    );
    assert_eq!(
        pay(
            &app,
            payout_request("x", &payout_body("wallet_6", 100), Some(OTHER_TOKEN))
        )
        .await
        .status,
        403
    );
    // Malformed requests: 400 naming the field, nothing written.
    let bad = [
        ("", payout_body("wallet_6", 100), "Idempotency-Key"),
        ("k", payout_body("wallet_6", 0), "amount"),
        ("k", payout_body("wallet_6", 1_000_001), "amount"),
        (
            "k",
            payout_body("wallet_6", 100).replace("NGN", "XYZ"),
            "currency",
        ),
        (
            "k",
            payout_body("wallet_6", 100).replace("generic", "stripe"),
            "provider",
        ),
        (
            "k",
            json!({"provider": "generic", "account": "wallet_6", "amount": 5, "currency": "NGN"})
                .to_string(),
            "destination",
        ),
        ("k", "not json".to_owned(), "body"),
    ];
    for (key, body, field) in bad {
        let r = pay(&app, payout_request(key, &body, Some(TOKEN))).await;
        assert_eq!(
            (r.status, r.body["field"].as_str()),
            (400, Some(field)),
            "{body}"
        );
    }
    assert_eq!(payout_items(&store).await, 0);
    assert_eq!(posts(&fake), 0);
    // The same key with another body is a reused key.
    assert_eq!(
        pay(
            &app,
            payout_request("k1", &payout_body("wallet_6", 100), Some(TOKEN))
        )
        .await
        .status,
        201
    );
    let reused = pay(
        &app,
        payout_request("k1", &payout_body("wallet_6", 200), Some(TOKEN)),
    )
    .await;
    assert_eq!(
        (reused.status, reused.body["error"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    // Another caller's same key is another payout.
    let pipeline = app.pipeline.store().clone();
    let pipeline = Pipeline::new(pipeline);
    let api = HttpProviderApi::new(payout_config(&url).api_endpoints.clone())
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let supports = |_: ProviderId| true;
    let request = PayoutRequest::parse(
        payout_body("wallet_6", 100).as_bytes(),
        payhook::payouts::Limits {
            max_amount_minor: 1_000_000,
            supports: &supports,
        },
    )
    .unwrap();
    let key = RequestKey::parse("k1").unwrap();
    let other = pipeline
        .payout(
            &api,
            PayoutCall {
                caller: "someone-else",
                key: &key,
                request: &request,
                lease_ms: LONG_LEASE_MS,
                aliases: &[],
            },
        )
        .await
        .unwrap();
    assert_eq!((other.status, other.replayed), (201, false));
    assert_eq!(posts(&fake), 2);
    assert_eq!(balance(&store, "wallet_6").await, 800);
}

#[tokio::test]
async fn a_crash_after_any_write_is_finished_by_a_retry_with_one_transfer() {
    // How many DynamoDB calls a clean payout makes.
    let base = store("payouts_crash").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let (url, fake) = fake_transfers().await;
    let app = payout_app_with_lease(store.clone(), &url, LEASE_MS);
    fund(&app, "wallet_c", 100_000, "pay_fundc").await;
    let clean = Invocation::new(None);
    let r = invoke(
        clean.clone(),
        pay(
            &app,
            payout_request("clean", &payout_body("wallet_c", 100), Some(TOKEN)),
        ),
    )
    .await;
    assert_eq!(r.status, 201);
    let calls = clean.calls();
    assert!(calls >= 8, "{calls} calls");
    for at in 0..calls {
        // GIVEN a request that dies right after its `at`-th call applied
        let key = format!("crash{at}");
        let inv = Invocation::new(Some((at, Fault::CrashAfter)));
        let first = invoke(
            inv.clone(),
            pay(
                &app,
                payout_request(&key, &payout_body("wallet_c", 100), Some(TOKEN)),
            ),
        )
        .await;
        assert!(
            first.status >= 500 || first.status == 201 || first.status == 202,
            "{at}: {}",
            first.status
        );
        // WHEN the caller retries the key (after the lease) until it has an answer about a
        // transfer (a look with too little time left leaves a payout reserved for the next)
        let mut answer = None;
        for _ in 0..80 {
            let r = pay(
                &app,
                payout_request(&key, &payout_body("wallet_c", 100), Some(TOKEN)),
            )
            .await;
            if r.status != 409 && r.status < 500 && r.payout_status.as_deref() != Some("reserved") {
                answer = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let answer = answer.unwrap_or_else(|| panic!("crash after call {at}: no answer"));
        assert!(
            matches!(answer.status, 201 | 202),
            "{at}: {}",
            answer.status
        );
        let payout = answer.body["payout"].as_str().unwrap().to_owned();
        // THEN one transfer, and the account debited once
        // (a crash between the send's fence and its call leaves it unknown: after the fence and
        // the visibility window, reconciliation's lookup proves it never arrived and sends it)
        if answer.payout_status.as_deref() == Some("sent") && answer.status == 202 {
            tokio::time::sleep(Duration::from_millis(fence_ms() + VISIBILITY_MS as u64)).await;
            let _ = reconcile(&store, &url).await;
        }
        assert_eq!(
            fake.lock().unwrap().posts.get(&payout),
            Some(&1),
            "crash after call {at}: first {} {:?}, answer {} {}",
            first.status,
            first.payout_status,
            answer.status,
            answer.body
        );
    }
    assert_eq!(
        balance(&store, "wallet_c").await,
        100_000 - 100 * (calls as i64 + 1)
    );
}

#[tokio::test]
async fn a_transfer_the_provider_fails_at_once_is_credited_back_once() {
    let store = store("payouts_fail_now").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_7", 400, "pay_fund7").await;
    fake.lock().unwrap().mode = Some(Mode::Failed);
    let r = pay(
        &app,
        payout_request("f1", &payout_body("wallet_7", 400), Some(TOKEN)),
    )
    .await;
    assert_eq!((r.status, r.body["status"].as_str()), (201, Some("failed")));
    assert_eq!(balance(&store, "wallet_7").await, 400);
    // Its webhook, arriving after, is a duplicate of the answer: nothing moves again.
    let payout = r.body["payout"].as_str().unwrap().to_owned();
    let dup = send(
        &app,
        signed(&transfer_webhook("transfer.failed", &payout, 0)),
    )
    .await;
    assert!(dup.replayed, "{}", dup.body);
    assert_eq!(balance(&store, "wallet_7").await, 400);
    assert_eq!(posts(&fake), 1);
}

#[tokio::test]
async fn a_decision_left_in_the_guard_by_a_crash_is_applied_by_the_next_payout() {
    let base = store("payouts_guard").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let (url, fake) = fake_transfers().await;
    let app = payout_app_with_lease(store.clone(), &url, LEASE_MS);
    let mut found = false;
    for at in 0..60 {
        // GIVEN 100 on an account, and payout A of 100 dying right after one of its writes
        let account = format!("wallet_g{at}");
        fund(&app, &account, 100, &format!("pay_g{at}")).await;
        let a_key = format!("a{at}");
        let inv = Invocation::new(Some((at, Fault::CrashAfter)));
        invoke(
            inv,
            pay(
                &app,
                payout_request(&a_key, &payout_body(&account, 100), Some(TOKEN)),
            ),
        )
        .await;
        // Only the crash that left A's reservation decided in the guard but not applied.
        let items = scan(&store, &store.tables().payments.clone()).await;
        let a_new = items.iter().any(|i| {
            i.get("payout_status")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some("new")
                && i.get("account").and_then(|v| v.as_s().ok()) == Some(&account)
        });
        let guard_holds_it = items.iter().any(|i| {
            i.get("pk").and_then(|v| v.as_s().ok()) == Some(&format!("guard#{account}#NGN"))
                && i.get("pending").is_some()
        });
        if !(a_new && guard_holds_it) {
            continue;
        }
        found = true;
        // WHEN payout B of 100 comes for the same account
        let b = pay(
            &app,
            payout_request(&format!("b{at}"), &payout_body(&account, 100), Some(TOKEN)),
        )
        .await;
        // THEN A's reservation, decided first, holds the money: B is refused
        assert_eq!(
            (b.status, b.body["error"].as_str()),
            (422, Some("insufficient_funds"))
        );
        assert_eq!(balance(&store, &account).await, 0);
        // AND A's retry finds its decision applied and sends it
        tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 50)).await;
        let a = pay(
            &app,
            payout_request(&a_key, &payout_body(&account, 100), Some(TOKEN)),
        )
        .await;
        assert_eq!(a.status, 201, "{:?}", a.body);
        assert_eq!(balance(&store, &account).await, 0);
        let a_id = a.body["payout"].as_str().unwrap().to_owned();
        let b_id = b.body["payout"].as_str().unwrap().to_owned();
        let f = fake.lock().unwrap();
        assert_eq!((f.posts.get(&a_id), f.posts.get(&b_id)), (Some(&1), None));
        break;
    }
    assert!(
        found,
        "no crash point left a decision unapplied in the guard"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(store: &DynamoStore, url: &str, port: u16) -> std::process::Child {
    payhook_env(
        &mut std::process::Command::new(env!("CARGO_BIN_EXE_payhook")),
        store,
    )
    .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
    .env("PAYHOOK_PAYOUT_TOKEN", TOKEN)
    .env("PAYHOOK_GENERIC_API_URL", url)
    .env("PAYHOOK_GENERIC_API_KEY", "k_test")
    // A lease that outlasts one call (4 s) with the clock's second, a second for the writes
    // before it and one for those after it (payouts::calls::call_fits: serve refuses less), and
    // half a second to spare (a request checks the same rule again, a moment later).
    .env("PAYHOOK_LEASE_MS", "7500")
    .env("PAYHOOK_PROVIDER_TIMEOUT_MS", "4000")
    .env("RUST_LOG", "error")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap()
}

/// One `POST /payouts` over TCP (a tiny HTTP/1.1 client: the test needs no more).
async fn post_payout(port: u16, key: &str, body: &str) -> Option<(u16, Value)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!(
        "POST /payouts HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN}\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

#[tokio::test]
async fn sigkill_while_the_provider_holds_the_call_then_a_retry_asks_and_sends_nothing_more() {
    // GIVEN payhook serve, funded, and a provider that takes the transfer but answers slowly
    let store = store("payouts_sigkill").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_k", 1_000, "pay_fundk").await;
    fake.lock().unwrap().mode = Some(Mode::Slow);
    let port = free_port();
    let mut child = serve(&store, &url, port);
    let body = payout_body("wallet_k", 400);
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "payhook serve did not start");
    // WHEN the process is killed (SIGKILL) while the provider holds the transfer call
    let request =
        tokio::spawn(
            async move { post_payout(port, "kill-1", &payout_body("wallet_k", 400)).await },
        );
    for _ in 0..100 {
        if posts(&fake) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(posts(&fake), 1, "the transfer call was made");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(request.await.unwrap().is_none_or(|(s, _)| s >= 500));
    // AND a new process serves the caller's retries: 409 while the lease holds, 202 while the
    // killed call's fence holds (nobody asks), then an answer from asking
    fake.lock().unwrap().mode = Some(Mode::Pending);
    let mut child = serve(&store, &url, port);
    let mut answer = None;
    for _ in 0..200 {
        if let Some((status, v)) = post_payout(port, "kill-1", &body).await {
            if status == 202 {
                assert_eq!(fake.lock().unwrap().gets, 0, "asked inside the fence");
            }
            if status != 409 && status != 202 && status < 500 {
                answer = Some((status, v));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // THEN the retry asked the provider, sent nothing more, and the account is debited once
    let (status, v) = answer.expect("the retry got an answer");
    assert_eq!((status, v["status"].as_str()), (201, Some("sent")), "{v}");
    assert_eq!(posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_k").await, 600);
}

// Multi-threaded: the CLI runs as a blocking child process while the fake provider answers it
// from this runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_shows_and_lists_payouts() {
    let store = store("payouts_cli").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_l", 1_000, "pay_fundl").await;
    let run = |args: &[&str]| {
        let out = payhook_env(
            &mut std::process::Command::new(env!("CARGO_BIN_EXE_payhook")),
            &store,
        )
        .args(args)
        .env("PAYHOOK_GENERIC_API_URL", &url)
        .env("PAYHOOK_GENERIC_API_KEY", "k_test")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let create = [
        "payouts",
        "create",
        "--key",
        "cli-1",
        "--account",
        "wallet_l",
        "--amount",
        "150",
        "--currency",
        "NGN",
        "--destination",
        r#"{"bank":"058","account_number":"0123456789"}"#,
    ];
    let first = run(&create);
    assert_eq!(
        (first["status"].as_i64(), first["answer"]["status"].as_str()),
        (Some(201), Some("sent"))
    );
    let again = run(&create);
    assert_eq!(again["replayed"], true);
    assert_eq!(posts(&fake), 1);
    let id = first["answer"]["payout"].as_str().unwrap();
    let shown = run(&["payouts", "show", id]);
    assert_eq!(
        (shown["status"].as_str(), shown["amount"].as_i64()),
        (Some("sent"), Some(150))
    );
    let listed = run(&["payouts", "list"]);
    assert!(listed.as_array().unwrap().iter().any(|p| p["payout"] == id));
    assert_eq!(balance(&store, "wallet_l").await, 850);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_the_provider_never_shows_waits_for_a_person_never_failed() {
    // GIVEN a provider that answers 503 to every send and never has the transfer
    let store = store("payouts_unresolved").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_u", 1_000, "pay_fundu").await;
    fake.lock().unwrap().mode = Some(Mode::Unavailable);
    let first = pay(
        &app,
        payout_request("u-1", &payout_body("wallet_u", 300), Some(TOKEN)),
    )
    .await;
    assert_eq!(first.status, 202);
    let payout = first.body["payout"].as_str().unwrap().to_owned();
    // WHEN reconciliation looks after each fence and window, until the sends are spent
    let mut last = None;
    for _ in 0..payhook::payouts::MAX_SENDS {
        tokio::time::sleep(Duration::from_millis(fence_ms() + VISIBILITY_MS as u64)).await;
        last = Some(reconcile(&store, &url).await);
    }
    // THEN it was sent three times under one reference, is still sent (never failed, never
    // credited back), and the last pass hands it to a person
    let record = store
        .payout(&PayoutId::parse(&payout).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((record.status.as_str(), record.sends), ("sent", 3));
    assert_eq!(fake.lock().unwrap().posts.get(&payout), Some(&3));
    assert_eq!(balance(&store, "wallet_u").await, 700);
    let report = last.unwrap();
    assert!(
        report
            .needs_human
            .iter()
            .any(|f| f.subject == payout && f.kind == "open_payout"),
        "{report:?}"
    );
    // AND `payhook payouts list --unsettled` lists it with why
    let out = payhook_env(
        &mut std::process::Command::new(env!("CARGO_BIN_EXE_payhook")),
        &store,
    )
    .args(["payouts", "list", "--unsettled"])
    .env("RUST_LOG", "error")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["payout"] == payout.as_str())
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(
        (row["sends"].as_i64(), row["reference"].as_str()),
        (Some(3), Some(payout.as_str()))
    );
    assert!(row["why"]
        .as_str()
        .unwrap()
        .contains("sent as often as allowed"));
}

/// A signed generic refund (or, `withdrawal`, a dispute withdrawal) of `amount` NGN of `payment`.
fn debit_of(payment: &str, reference: &str, amount: i64, withdrawal: bool) -> String {
    if withdrawal {
        event_body(
            &format!("evt_{reference}"),
            "dispute.funds_withdrawn",
            json!({"dispute": reference, "reference": payment, "amount": amount, "currency": "NGN"}),
        )
    } else {
        event_body(
            &format!("evt_{reference}"),
            "refund.succeeded",
            json!({"reference": reference, "payment_reference": payment, "amount": amount, "currency": "NGN"}),
        )
    }
}

#[tokio::test]
async fn money_a_parked_debit_takes_back_is_never_paid_out() {
    // GIVEN a refund of 300 and a dispute withdrawal of 200 that arrived before their payment
    // (parked: 409, the provider will redeliver them later)
    let store = store("payouts_parked_hold").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    let refund = debit_of("pay_held", "rf_held", 300, false);
    let withdrawal = debit_of("pay_held", "dp_held", 200, true);
    for body in [&refund, &withdrawal] {
        assert_eq!(send(&app, signed(body)).await.status, 409);
    }

    // WHEN the payment of 1,000 is credited, and a payout of 600 is asked for at once
    fund(&app, "wallet_h", 1_000, "pay_held").await;
    let r = pay(
        &app,
        payout_request("h1", &payout_body("wallet_h", 600), Some(TOKEN)),
    )
    .await;

    // THEN the credit took the parked debits first: only 500 was ever spendable, so the payout
    // is refused and no transfer is made
    assert_eq!(
        (
            r.status,
            r.body["error"].as_str(),
            r.body["available"].as_i64()
        ),
        (422, Some("insufficient_funds"), Some(500)),
        "{:?}",
        r.body
    );
    assert_eq!(balance(&store, "wallet_h").await, 500);
    assert_eq!(posts(&fake), 0);
    // AND the provider's redeliveries find them applied: answered 200, nothing moves again
    for body in [&refund, &withdrawal] {
        let again = send(&app, signed(body)).await;
        assert_eq!(again.status, 200, "{}", again.body);
    }
    assert_eq!(balance(&store, "wallet_h").await, 500);
}

#[tokio::test]
async fn money_a_parked_debit_takes_back_is_never_paid_out_while_payouts_race_the_credit() {
    // GIVEN a refund of 400 parked before its payment of 1,000
    let store = store("payouts_parked_race").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    let refund = debit_of("pay_race", "rf_race", 400, false);
    assert_eq!(send(&app, signed(&refund)).await.status, 409);

    // WHEN the payment is credited while eight payouts of 100 are asked for at the same time
    let credit = {
        let app = app.clone();
        tokio::spawn(async move { fund(&app, "wallet_r", 1_000, "pay_race").await })
    };
    let mut asks = Vec::new();
    for i in 0..8 {
        let app = app.clone();
        asks.push(tokio::spawn(async move {
            let req = payout_request(&format!("r{i}"), &payout_body("wallet_r", 100), Some(TOKEN));
            pay(&app, req).await
        }));
    }
    credit.await.unwrap();
    let mut reserved = 0_i64;
    for a in asks {
        let r = a.await.unwrap();
        if r.status != 422 {
            reserved += 100;
        }
    }
    // AND the refund is redelivered
    assert_eq!(send(&app, signed(&refund)).await.status, 200);

    // THEN whatever the interleaving, no payout spent what the refund takes: the account never
    // goes below zero, and every transfer made was reserved against the 600 left
    let left = balance(&store, "wallet_r").await;
    assert!(reserved <= 600, "reserved {reserved}");
    assert_eq!(left, 600 - reserved);
    assert!(left >= 0);
    assert!(posts(&fake) as i64 * 100 <= reserved);
}

/// The console's page of one payout, read from the store as an operator would.
async fn payout_page(store: &DynamoStore, id: &str) -> (u16, String) {
    console_get(store, &format!("/payouts/{id}")).await
}

/// A console page read from the store.
async fn console_get(store: &DynamoStore, path: &str) -> (u16, String) {
    use payhook::console::source::StoreSource;
    use payhook::console::{router, Console};
    let access = "access-token-of-the-payout-page-0123456789abcdef";
    let console = Arc::new(Console {
        source: StoreSource {
            store: store.clone(),
            label: "test tables".into(),
        },
        // The providers' mappings read the bodies the money figures come from.
        replay: Some(payhook::runtime::ops(&common::config(30_000), store.clone()).unwrap()),
        csrf: "csrf-of-the-payout-page".into(),
        origin: "http://127.0.0.1:9".into(),
        lease_ms: 30_000,
        pending_after_ms: 900_000,
        payout_unresolved_after_ms: 86_400_000,
        operator: "console:tests".into(),
        access: access.into(),
        done: Default::default(),
    });
    let res = router(console)
        .oneshot(
            Request::get(path)
                .header("host", "127.0.0.1:9")
                .header("cookie", format!("payhook_console_9={access}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn a_payouts_console_page_tells_its_timeline_in_order() {
    // GIVEN a payout sent to the provider, which then says it failed, twice
    let store = store("payouts_timeline").await;
    let (url, fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_t", 1_000, "pay_fund_t").await;
    let made = pay(
        &app,
        payout_request("t1", &payout_body("wallet_t", 100), Some(TOKEN)),
    )
    .await;
    let id = made.body["payout"].as_str().unwrap().to_owned();
    assert_eq!(posts(&fake), 1);
    let (_, sent) = payout_page(&store, &id).await;
    for n in 0..2 {
        let r = send(&app, signed(&transfer_webhook("transfer.failed", &id, n))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(balance(&store, "wallet_t").await, 1_000);

    // WHEN the operator opens its page
    let (status, page) = payout_page(&store, &id).await;

    // THEN it says what it is, and its timeline runs opened, reserved, the provider's word,
    // the money credited back, in that order, each delivery linking to its record
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-outcome="failed""#), "{page}");
    assert!(page.contains("1.00 NGN"), "{page}");
    assert!(page.contains(r#"href="/accounts/wallet_t""#), "{page}");
    let at = |text: &str| {
        page.find(text)
            .unwrap_or_else(|| panic!("{text} missing: {page}"))
    };
    assert!(at(">opened<") < at(">reserved<"), "{page}");
    assert!(at(">reserved<") < at(">transfer.failed<"), "{page}");
    assert!(at(">reserved<") < at(">payout_failed<"), "{page}");
    assert_eq!(page.matches(r#"class="delivery""#).count(), 2, "{page}");
    assert!(
        page.contains("the reserved money was credited back"),
        "{page}"
    );
    // AND before the word it said the money stays reserved, waiting for the provider
    assert!(sent.contains("the money stays reserved"), "{sent}");
    // AND a payout the provider paid is money out on the traffic page (the failed one is not)
    let paid = pay(
        &app,
        payout_request("t2", &payout_body("wallet_t", 100), Some(TOKEN)),
    )
    .await;
    let paid = paid.body["payout"].as_str().unwrap().to_owned();
    let r = send(
        &app,
        signed(&transfer_webhook("transfer.succeeded", &paid, 0)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // AND one the provider answers paid at once (payhook's own record of the answer; its
    // webhook, later, is a duplicate), and one whose webhook names no amount (the payout's own)
    fake.lock().unwrap().mode = Some(Mode::Success);
    let at_once = pay(
        &app,
        payout_request("t3", &payout_body("wallet_t", 100), Some(TOKEN)),
    )
    .await;
    assert_eq!(
        at_once.body["status"].as_str(),
        Some("paid"),
        "{:?}",
        at_once.body
    );
    let at_once = at_once.body["payout"].as_str().unwrap().to_owned();
    let dup = send(
        &app,
        signed(&transfer_webhook("transfer.succeeded", &at_once, 0)),
    )
    .await;
    assert!(dup.replayed, "{}", dup.body);
    fake.lock().unwrap().mode = Some(Mode::Pending);
    let quiet = pay(
        &app,
        payout_request("t4", &payout_body("wallet_t", 100), Some(TOKEN)),
    )
    .await;
    let quiet = quiet.body["payout"].as_str().unwrap().to_owned();
    let no_amount = event_body(
        "evt_no_amount",
        "transfer.succeeded",
        json!({"reference": quiet}),
    );
    assert_eq!(send(&app, signed(&no_amount)).await.status, 200);
    assert_eq!(balance(&store, "wallet_t").await, 700);
    let (_, traffic) = console_get(&store, "/traffic?window=day").await;
    let money = &traffic[traffic
        .find(r#"id="money""#)
        .unwrap_or_else(|| panic!("{traffic}"))..];
    assert!(
        money.contains("<td>10.00 NGN</td><td>3.00 NGN</td>"),
        "in 10.00 (the funding), out 3.00 (three paid payouts, each once): {money}"
    );
    // AND an unknown id is a 404 that says what to do
    let (missing, body) = payout_page(&store, "po_nosuch").await;
    assert_eq!(missing, 404, "{body}");
    assert!(body.contains("payhook payouts list"), "{body}");
}

// --- A settlement word's claim held on its payout (#44) ---

/// The payout item `payout` as stored.
async fn payout_item(store: &DynamoStore, payout: &str) -> HashMap<String, AttributeValue> {
    scan(store, &store.tables().payments.clone())
        .await
        .into_iter()
        .find(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&format!("payout#{payout}")))
        .expect("the payout item")
}

/// The state of the claim held on `payout` under `key` (`st` of `rc#{key}`), if there is one.
async fn word_state(store: &DynamoStore, payout: &str, key: &str) -> Option<String> {
    payout_item(store, payout)
        .await
        .get(&format!("rc#{key}"))
        .and_then(|v| v.as_m().ok())
        .and_then(|m| m.get("st"))
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// The payout's `open` index entry, if it is listed.
async fn open_entry(store: &DynamoStore, payout: &str) -> Option<String> {
    payout_item(store, payout)
        .await
        .get("open")
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// A new payout of 100 NGN from `account` under `key`, sent and still deciding at the provider.
async fn sent_payout(app: &Arc<App<DynamoStore>>, account: &str, key: &str) -> String {
    let r = pay(
        app,
        payout_request(key, &payout_body(account, 100), Some(TOKEN)),
    )
    .await;
    assert_eq!(r.payout_status.as_deref(), Some("sent"), "{:?}", r.body);
    r.body["payout"].as_str().unwrap().to_owned()
}

/// How many ledger entries of `account` carry `key`.
async fn entries_under(store: &DynamoStore, account: &str, key: &str) -> usize {
    let entries = store
        .entries(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    entries.iter().filter(|p| p.key.as_str() == key).count()
}

#[tokio::test]
async fn a_settlement_word_costs_a_read_and_four_writes_and_its_duplicate_a_read_and_its_log() {
    // GIVEN a funded wallet and two payouts sent, the provider still deciding (the process's
    // layout read is behind us)
    let base = store("pw_cost").await;
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    let (url, _fake) = fake_transfers().await;
    let app = payout_app(counted.clone(), &url);
    fund(&app, "wallet_c", 1_000, "pay_fundc").await;
    let a = sent_payout(&app, "wallet_c", "c1").await;
    let b = sent_payout(&app, "wallet_c", "c2").await;
    let calls = |c: &RequestCounter| (c.get("UpdateItem"), c.get("GetItem"), c.get("PutItem"));
    let key_a = format!("generic:payout_failed:{a}");

    // WHEN the provider says the first failed
    counter.reset();
    let first = send(&app, signed(&transfer_webhook("transfer.failed", &a, 0))).await;

    // THEN it read the payout, took the word with its claim in one write, posted the credit
    // back, finished the claim and logged the delivery: the claims table was not written (it
    // was 3 PutItem, 2 UpdateItem and 2 GetItem when it held the claim)
    assert_eq!((first.status, first.replayed), (200, false), "{first:?}");
    assert_eq!(first.json()["status"], "applied");
    assert_eq!(calls(&counter), (2, 1, 2), "{:?}", counter.snapshot());
    assert_eq!(counter.get("Query"), 0);
    assert_eq!(word_state(&base, &a, &key_a).await.as_deref(), Some("DONE"));
    assert_eq!(open_entry(&base, &a).await, None);
    assert!(!common::held::claims_table_holds(&base, &key_a).await);
    assert_eq!(balance(&base, "wallet_c").await, 900);

    // AND each duplicate replays the stored bytes from the read: two calls with its log
    for n in 1..3 {
        counter.reset();
        let dup = send(&app, signed(&transfer_webhook("transfer.failed", &a, n))).await;
        assert!(dup.replayed, "{dup:?}");
        assert_eq!(dup.body, first.body);
        assert_eq!(calls(&counter), (0, 1, 1), "{:?}", counter.snapshot());
    }

    // AND a success settles the second payout with its claim the same way, with no ledger entry
    // (its reservation already debited it), and a failure after it (stale: the provider's paid
    // outranks it) is answered from the read with no claim written at all
    counter.reset();
    let paid = send(&app, signed(&transfer_webhook("transfer.succeeded", &b, 0))).await;
    assert_eq!(paid.json()["status"], "applied", "{paid:?}");
    assert_eq!(calls(&counter), (2, 1, 1), "{:?}", counter.snapshot());
    counter.reset();
    let late = send(&app, signed(&transfer_webhook("transfer.failed", &b, 1))).await;
    assert_eq!(
        (late.status, late.json()["status"].as_str()),
        (200, Some("stale"))
    );
    assert_eq!(calls(&counter), (0, 1, 1), "{:?}", counter.snapshot());
    let key_late = format!("generic:payout_failed:{b}");
    assert_eq!(word_state(&base, &b, &key_late).await, None);
    assert!(!common::held::claims_table_holds(&base, &key_late).await);

    // AND the money moved once each: the failed payout credited back, the paid one debited
    assert_eq!(balance(&base, "wallet_c").await, 900);
    assert_eq!(entries_under(&base, "wallet_c", &key_a).await, 1);
    let paid_key = format!("generic:payout_paid:{b}");
    assert_eq!(entries_under(&base, "wallet_c", &paid_key).await, 0);
}

#[tokio::test]
async fn a_fault_at_any_call_of_a_settlement_word_is_finished_by_the_retry_once() {
    let base = store("pw_fault").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let (url, _fake) = fake_transfers().await;
    // Payouts are made with time for a provider call; their words are heard with a short
    // lease, so a retry takes over a claim a crash left.
    let maker = payout_app(store.clone(), &url);
    let words = payout_app_with_lease(store.clone(), &url, 150);
    fund(&maker, "wallet_f", 10_000, "pay_fundf").await;
    for step in 0..5 {
        for fault in common::faults::ALL_FAULTS {
            // GIVEN a payout sent, and its failure word meeting `fault` at call `step` (the
            // payout's read, the word with its claim, the credit back, the claim DONE, the log)
            let id = sent_payout(&maker, "wallet_f", &format!("f{step}_{fault:?}")).await;
            let key = format!("generic:payout_failed:{id}");
            let body = transfer_webhook("transfer.failed", &id, step);
            let inv = Invocation::new(Some((step, fault)));
            let first = invoke(inv.clone(), send(&words, signed(&body))).await;
            assert!(inv.fired(), "{id} {step} {fault:?}: the fault never fired");
            assert!(
                first.status == 503 || first.status == 200,
                "{step} {fault:?}: {} {}",
                first.status,
                first.body
            );

            // WHEN the provider retries until it hears a final answer
            let last = common::held::until_settled(&words, &body).await;

            // THEN it applied, its claim on the payout is DONE, the payout is off the open
            // index, the claims table was never written, a duplicate replays, and the credit
            // back is in the ledger once
            assert_eq!(last.status, 200, "{step} {fault:?}: {}", last.body);
            assert_eq!(last.json()["status"], "applied", "{step} {fault:?}");
            assert_eq!(
                word_state(&store, &id, &key).await.as_deref(),
                Some("DONE"),
                "{step} {fault:?}"
            );
            assert_eq!(open_entry(&store, &id).await, None, "{step} {fault:?}");
            assert!(!common::held::claims_table_holds(&store, &key).await);
            let again = send(&words, signed(&body)).await;
            assert_eq!(
                (again.replayed, again.body.as_str()),
                (true, last.body.as_str()),
                "{step} {fault:?}"
            );
            assert_eq!(
                entries_under(&store, "wallet_f", &key).await,
                1,
                "{step} {fault:?}"
            );
            // AND the payout's reservation came back whole, once
            assert_eq!(
                balance(&store, "wallet_f").await,
                10_000,
                "{step} {fault:?}"
            );
        }
    }
}

#[tokio::test]
async fn reconciliation_finishes_a_settlement_word_left_applying_and_a_word_meanwhile_goes_through_the_claims_table(
) {
    // GIVEN a payout sent, whose failure word's invocation died right after its first write
    // (the word recorded, its claim APPLYING on the payout, no credit back yet)
    let base = store("pw_resume").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let (url, _fake) = fake_transfers().await;
    let maker = payout_app(store.clone(), &url);
    let words = payout_app_with_lease(store.clone(), &url, 150);
    fund(&maker, "wallet_r", 1_000, "pay_fundr").await;
    let id = sent_payout(&maker, "wallet_r", "r1").await;
    let failed = transfer_webhook("transfer.failed", &id, 0);
    let died = invoke(
        Invocation::new(Some((1, Fault::CrashAfter))),
        send(&words, signed(&failed)),
    )
    .await;
    assert_eq!(died.status, 503, "{died:?}");
    let key = format!("generic:payout_failed:{id}");
    assert_eq!(
        word_state(&store, &id, &key).await.as_deref(),
        Some("APPLYING")
    );
    assert!(open_entry(&store, &id)
        .await
        .is_some_and(|o| o.starts_with("POSTING")));
    assert_eq!(balance(&store, "wallet_r").await, 900);

    // WHEN the provider then says it paid after all, while that claim is still APPLYING
    let paid = send(
        &words,
        signed(&transfer_webhook("transfer.succeeded", &id, 1)),
    )
    .await;

    // THEN the success goes through the claims table (one `open` entry per item) and applies,
    // and leaves the payout listed under POSTING for the stuck claim's sweep
    assert_eq!(paid.json()["status"], "applied", "{paid:?}");
    let paid_key = format!("generic:payout_paid:{id}");
    assert!(common::held::claims_table_holds(&store, &paid_key).await);
    assert_eq!(word_state(&store, &id, &paid_key).await, None);
    assert!(open_entry(&store, &id)
        .await
        .is_some_and(|o| o.starts_with("POSTING")));

    // WHEN the provider gave up on the failure and one reconciliation pass runs
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = reconcile(&store, &url).await;

    // THEN the failure's credit back is posted once, its claim DONE, the payout off the index,
    // and the resume is logged as a held movement's
    assert_eq!(
        word_state(&store, &id, &key).await.as_deref(),
        Some("DONE"),
        "{report:?}"
    );
    assert_eq!(open_entry(&store, &id).await, None);
    let resumed = report.completed.iter().filter(|f| f.kind == "stuck_claim");
    assert_eq!(resumed.count(), 1, "{report:?}");
    let events = scan(&store, &store.tables().events.clone()).await;
    assert!(events
        .iter()
        .any(|e| e.get("event_type").and_then(|v| v.as_s().ok())
            == Some(&payhook::pipeline::RESUME_HELD_EVENT_TYPE.to_owned())));
    // AND the money follows the provider: reserved, credited back, debited again
    assert_eq!(balance(&store, "wallet_r").await, 900);
    assert_eq!(entries_under(&store, "wallet_r", &key).await, 1);
    assert_eq!(entries_under(&store, "wallet_r", &paid_key).await, 1);
    let rec = store
        .payout(&PayoutId::parse(&id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.status.as_str(), "paid");
    // AND the failure's late redelivery replays the resumed answer
    let late = send(&words, signed(&failed)).await;
    assert!(late.replayed, "{late:?}");
    assert_eq!(balance(&store, "wallet_r").await, 900);
}

#[tokio::test]
async fn a_zombie_word_attempt_is_fenced_by_its_owner_and_needs_attention_reads_the_payout() {
    use payhook::idempotency::{Claims, FinalizeOutcome, NewHostClaim, OwnerToken, StoredResponse};
    use payhook::payouts::{HeldWord, HeldWordCall, WordOrigin};

    // GIVEN a payout sent, and an attempt A that took its failure word's claim with a lease
    // that has run out
    let store = store("pw_zombie").await;
    let (url, _fake) = fake_transfers().await;
    let app = payout_app(store.clone(), &url);
    fund(&app, "wallet_z", 1_000, "pay_fundz").await;
    let id = PayoutId::parse(&sent_payout(&app, "wallet_z", "z1").await).unwrap();
    let key = payhook::domain::IdempotencyKey::new(
        ProviderId::GENERIC,
        payhook::domain::Operation::PayoutFailed,
        &id.reference(),
    );
    let origin = WordOrigin {
        provider: ProviderId::GENERIC,
        money: None,
        recipient: None,
    };
    let word = HeldWordCall {
        origin: &origin,
        word: payhook::domain::TransferState::Failed,
        provider_status: "failed",
        key: &key,
    };
    let fp = payhook::domain::Fingerprint::from_stored("fp-of-the-word".into());
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    let claim = |token| NewHostClaim {
        token,
        lease_ms: 0,
        fingerprint: &fp,
    };
    let taken = store.settle_held(&id, word, claim(&a)).await.unwrap();
    assert!(matches!(taken, HeldWord::Taken { .. }), "{taken:?}");
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    // WHEN B meets the claim and takes it over
    let met = store.settle_held(&id, word, claim(&b)).await.unwrap();
    let HeldWord::Claimed(_, held) = met else {
        panic!("{met:?}")
    };
    assert_eq!(held.fingerprint, fp);
    assert!(store
        .take_over_word(&id, &key, &a, &b, 30_000)
        .await
        .unwrap());

    // THEN A can neither take it back nor finish it; B finishes it, once even when resent; and
    // A's late finalize hears B's answer
    assert!(!store
        .take_over_word(&id, &key, &a, &a, 30_000)
        .await
        .unwrap());
    let theirs = StoredResponse {
        status: 200,
        body: "{\"by\":\"b\"}".into(),
    };
    let mine = StoredResponse {
        status: 200,
        body: "{\"by\":\"a\"}".into(),
    };
    assert_eq!(
        store.finalize_word(&id, &key, &a, &mine).await.unwrap(),
        FinalizeOutcome::Superseded(None)
    );
    for _ in 0..2 {
        assert_eq!(
            store.finalize_word(&id, &key, &b, &theirs).await.unwrap(),
            FinalizeOutcome::Done
        );
    }
    assert_eq!(
        store.finalize_word(&id, &key, &a, &mine).await.unwrap(),
        FinalizeOutcome::Superseded(Some(theirs.clone()))
    );
    assert_eq!(open_entry(&store, id.as_str()).await, None);

    // AND the console's needs-attention counts the word done, read from its payout
    let done = store.done_among(&[(key.clone(), None)]).await.unwrap();
    assert!(done.contains(&key), "{done:?}");
}
