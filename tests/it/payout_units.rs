//! Issue #42, case 1: amounts in the provider's unit both ways. Through the real router and
//! pipeline against dynalite and a fake Stripe on loopback (`POST /v1/transfers` form-encoded,
//! `GET /v1/transfers?transfer_group=`), which keeps amounts in Stripe's unit as Stripe does:
//! MGA is zero-decimal there (ISO: 2), ISK two-decimal (ISO: 0). Money comes in through Stripe
//! webhooks in Stripe's unit too, so a test that passed by converting neither way would show
//! in the balances.
//!
//! On the code before the fix (2e845db) all three fail at their first assertion: the MGA
//! payout asked Stripe for `amount=100000` (100,000 MGA for a 1,000 MGA payout), the ISK one
//! for `amount=5000` (50 ISK for 5,000), and a payout of 1.50 MGA was reserved and sent (202).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{Request, StatusCode};
use common::*;
use payhook::cli::client::sign_headers;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, ProviderId};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "payout-token-for-the-unit-tests-0000001";
const STRIPE_SECRET: &str = "whsec_payhook_tests_payout_units_secret";

// ------------------------------------------------------------------------------ the fake

/// One transfer as fake Stripe holds it: its amount in Stripe's unit.
#[derive(Debug, Clone)]
struct Transfer {
    group: String,
    amount: i64,
    currency: String,
    destination: String,
}

#[derive(Default)]
struct Fake {
    transfers: Vec<Transfer>,
    /// Every POST's form, as sent.
    posts: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Fake>>;

fn transfer_object(i: usize, t: &Transfer) -> Value {
    json!({"id": format!("tr_{i}"), "object": "transfer", "amount": t.amount,
           "currency": t.currency, "destination": t.destination, "transfer_group": t.group,
           "metadata": {"payhook_payout": t.group}, "reversed": false, "amount_reversed": 0})
}

fn form(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.replace("%5B", "[").replace("%5D", "]"), v.to_owned()))
        .collect()
}

async fn post_transfer(State(fake): State<Shared>, body: String) -> (StatusCode, String) {
    let f = form(&body);
    let mut fake = fake.lock().unwrap();
    fake.posts.push(f.clone());
    let Ok(amount) = f["amount"].parse::<i64>() else {
        return (
            StatusCode::BAD_REQUEST,
            json!({"error": {"type": "invalid_request_error"}}).to_string(),
        );
    };
    let t = Transfer {
        group: f["transfer_group"].clone(),
        amount,
        currency: f["currency"].clone(),
        destination: f["destination"].clone(),
    };
    fake.transfers.push(t.clone());
    let answer = transfer_object(fake.transfers.len(), &t);
    (StatusCode::OK, answer.to_string())
}

async fn list_transfers(
    State(fake): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> (StatusCode, String) {
    let fake = fake.lock().unwrap();
    let group = q.get("transfer_group").cloned().unwrap_or_default();
    let data: Vec<Value> = fake
        .transfers
        .iter()
        .enumerate()
        .filter(|(_, t)| t.group == group)
        .map(|(i, t)| transfer_object(i + 1, t))
        .collect();
    (
        StatusCode::OK,
        json!({"object": "list", "data": data}).to_string(),
    )
}

async fn fake_stripe() -> (String, Shared) {
    let shared: Shared = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/transfers",
            axum::routing::post(post_transfer).get(list_transfers),
        )
        .with_state(shared.clone());
    (serve_fake(app).await, shared)
}

// ------------------------------------------------------------------------------ payhook

fn config(url: &str) -> Config {
    let url = url.to_owned();
    Config::from_lookup(move |name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
        "PAYHOOK_STRIPE_SECRETS" => Some(STRIPE_SECRET.to_owned()),
        "PAYHOOK_STRIPE_API_URL" => Some(url.clone()),
        "PAYHOOK_STRIPE_API_KEY" => Some("sk_test_units".into()),
        "PAYHOOK_LEASE_MS" => Some("30000".into()),
        "PAYHOOK_PROVIDER_TIMEOUT_MS" => Some("2000".into()),
        _ => None,
    })
    .unwrap()
}

fn payout_app(store: DynamoStore, config: &Config) -> Arc<App<DynamoStore>> {
    common::payout_app(store, config, TOKEN)
}

async fn call(app: &Arc<App<DynamoStore>>, req: Request<Body>) -> (u16, Value) {
    let res = payhook::http::router(app.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn pay(app: &Arc<App<DynamoStore>>, key: &str, amount: i64, currency: &str) -> (u16, Value) {
    let body = json!({"provider": "stripe", "account": "w_units", "amount": amount,
                      "currency": currency, "destination": {"account": "acct_1"}});
    let req = Request::post("/payouts")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    call(app, req).await
}

/// A Stripe-signed webhook about `object` (its `type` given).
async fn stripe_event(
    app: &Arc<App<DynamoStore>>,
    cfg: &Config,
    id: &str,
    kind: &str,
    object: Value,
) -> (u16, Value) {
    let body =
        json!({"id": id, "object": "event", "type": kind, "data": {"object": object}}).to_string();
    let mut req = Request::post("/webhooks/stripe").header("content-type", "application/json");
    for (k, v) in sign_headers(ProviderId::STRIPE, cfg, body.as_bytes(), id, now_s()).unwrap() {
        req = req.header(k, v);
    }
    call(app, req.body(Body::from(body)).unwrap()).await
}

/// Funds `w_units` by a Stripe payment of `stripe_amount` in Stripe's unit.
async fn fund(app: &Arc<App<DynamoStore>>, cfg: &Config, stripe_amount: i64, currency: &str) {
    let id = format!("pi_fund_{currency}");
    let intent = json!({"id": id, "object": "payment_intent", "amount": stripe_amount,
        "amount_received": stripe_amount, "currency": currency.to_ascii_lowercase(),
        "status": "succeeded", "metadata": {"account": "w_units"}});
    let (status, body) = stripe_event(
        app,
        cfg,
        &format!("evt_{id}"),
        "payment_intent.succeeded",
        intent,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn balance(store: &DynamoStore, currency: &str) -> i64 {
    let b = store
        .balance(&AccountId::parse("w_units").unwrap())
        .await
        .unwrap();
    b.balances
        .get(&Currency::parse(currency).unwrap())
        .copied()
        .unwrap_or(0)
}

fn posts(fake: &Shared) -> Vec<HashMap<String, String>> {
    fake.lock().unwrap().posts.clone()
}

// ------------------------------------------------------------------------------ the tests

#[tokio::test]
async fn case1_a_zero_decimal_stripe_payout_sends_stripes_amount_and_its_reversal_credits_back_once(
) {
    // GIVEN 1,000 MGA (100,000 ISO minor units) paid in through Stripe as `amount: 1000`
    let (url, fake) = fake_stripe().await;
    let store = store("units_mga").await;
    let cfg = config(&url);
    let app = payout_app(store.clone(), &cfg);
    fund(&app, &cfg, 1_000, "MGA").await;
    assert_eq!(
        balance(&store, "MGA").await,
        100_000,
        "Stripe's 1000 MGA in"
    );

    // WHEN all of it is paid out through Stripe
    let (status, answer) = pay(&app, "mga-1", 100_000, "MGA").await;

    // THEN Stripe is asked once for 1000 MGA in its own unit, and the payout is paid
    let sent = posts(&fake);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (sent[0]["amount"].as_str(), sent[0]["currency"].as_str()),
        ("1000", "mga")
    );
    assert_eq!(
        (status, answer["status"].as_str()),
        (201, Some("paid")),
        "{answer}"
    );
    assert_eq!(balance(&store, "MGA").await, 0);
    let payout = answer["payout"].as_str().unwrap().to_owned();

    // WHEN Stripe reverses the whole transfer, echoing the amount it moved (twice: at least once)
    let reversed = json!({"id": "tr_1", "object": "transfer", "amount": 1000, "currency": "mga",
        "destination": "acct_1", "transfer_group": payout, "amount_reversed": 1000,
        "reversed": true, "metadata": {"payhook_payout": payout}});
    for _ in 0..2 {
        let (s, body) = stripe_event(
            &app,
            &cfg,
            "evt_rev_mga",
            "transfer.reversed",
            reversed.clone(),
        )
        .await;
        assert_eq!(s, 200, "{body}");
    }

    // THEN the money Stripe returned is credited back, once; the payout is reversed, not a
    // conflict in front of a person; and nothing more was sent
    assert_eq!(balance(&store, "MGA").await, 100_000);
    let (s, record) = call(
        &app,
        Request::get(format!("/payouts/{payout}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, record["status"].as_str()),
        (200, Some("reversed")),
        "{record}"
    );
    assert_eq!(posts(&fake).len(), 1);
}

#[tokio::test]
async fn case1_a_two_decimal_at_stripe_iso_zero_decimal_payout_sends_a_hundred_times_the_kronur() {
    // GIVEN 5,000 ISK paid in through Stripe as `amount: 500000` (ISK is two-decimal there)
    let (url, fake) = fake_stripe().await;
    let store = store("units_isk").await;
    let cfg = config(&url);
    let app = payout_app(store.clone(), &cfg);
    fund(&app, &cfg, 500_000, "ISK").await;
    assert_eq!(balance(&store, "ISK").await, 5_000);

    // WHEN 5,000 ISK are paid out, and the key is retried
    let first = pay(&app, "isk-1", 5_000, "ISK").await;
    let again = pay(&app, "isk-1", 5_000, "ISK").await;

    // THEN Stripe is asked once for 500000 (5,000 ISK), and the retry is the same payout
    let sent = posts(&fake);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["amount"], "500000");
    assert_eq!(first.1["status"].as_str(), Some("paid"), "{}", first.1);
    assert_eq!(first.1["payout"], again.1["payout"]);
    assert_eq!(balance(&store, "ISK").await, 0);
}

#[tokio::test]
async fn case1_an_amount_stripe_cannot_carry_is_refused_with_422_before_any_debit() {
    // GIVEN an account holding MGA, HUF and KWD
    let (url, fake) = fake_stripe().await;
    let store = store("units_422").await;
    let cfg = config(&url);
    let app = payout_app(store.clone(), &cfg);
    fund(&app, &cfg, 1_000, "MGA").await;
    fund(&app, &cfg, 100_000, "HUF").await;
    fund(&app, &cfg, 100_000, "KWD").await;
    let before = counts(&store).await;

    // WHEN payouts ask for what Stripe's unit cannot say: a fraction of an ariary, a fraction
    // of a forint (Stripe pays out HUF in whole units), a last KWD digit that is not 0, and a
    // currency Stripe does not take
    let refused = [
        ("mga-frac", 150, "MGA"),
        ("huf-frac", 1_045, "HUF"),
        ("kwd-digit", 5_124, "KWD"),
        ("iqd", 1_000, "IQD"),
    ];
    for (key, amount, currency) in refused {
        let (status, body) = pay(&app, key, amount, currency).await;
        // THEN each is a 422 naming why, and nothing is claimed, debited or sent
        assert_eq!(status, 422, "{key}: {body}");
        assert_eq!(body["error"], "unrepresentable_amount", "{key}: {body}");
        assert_eq!(body["field"], "amount");
        assert!(!body["message"].as_str().unwrap_or("").is_empty());
    }
    assert_eq!(counts(&store).await, before, "nothing written");
    assert_eq!(balance(&store, "MGA").await, 100_000);
    assert_eq!(balance(&store, "HUF").await, 100_000);
    assert_eq!(balance(&store, "KWD").await, 100_000);
    assert!(posts(&fake).is_empty());

    // AND the same currencies in amounts Stripe can carry are paid
    assert_eq!(pay(&app, "huf-whole", 1_000, "HUF").await.0, 201);
    assert_eq!(pay(&app, "kwd-ten", 5_120, "KWD").await.0, 201);
    let sent: Vec<String> = posts(&fake).iter().map(|p| p["amount"].clone()).collect();
    assert_eq!(sent, ["1000", "5120"]);
}
