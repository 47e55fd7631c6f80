//! Issue #42, cases 2, 4 and 5: every provider word about a transfer judged alike, and no
//! configuration that reserves and never sends. Through the real router and pipeline against
//! dynalite and a fake transfer API on loopback that speaks the generic contract and Paystack's
//! (`POST /transfer`, `GET /transfer/verify/{reference}`) the way the real ones behave: it can
//! take a transfer and answer 500, keep it invisible to a lookup, refuse a second POST under a
//! reference it holds as a duplicate, and answer a lookup about something else.
//!
//! Each test counts what matters: POSTs per reference, transfers the provider holds, balances,
//! and the answers. Each was run against the code before the fix (the commit says how it failed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use common::*;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "payout-token-for-the-word-tests-000001";
/// One call's bound: short, so fences pass quickly.
const BOUND_MS: i64 = 300;
/// The generic sender's visibility window (recorded on each send).
const VISIBILITY_MS: i64 = 500;
const LEASE_MS: i64 = 30_000;
const PAYSTACK_SECRET: &str = "sk_test_payout_words_paystack";

// ------------------------------------------------------------------------------ the fake

/// How the fake answers the first POST under a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstPost {
    /// Takes the transfer (pending) and answers it.
    Answer,
    /// Takes the transfer and answers 500: the caller cannot know.
    TakeThen500,
    /// Answers 500 and takes nothing.
    Fail500,
}

struct Transfer {
    reference: String,
    amount: i64,
    status: &'static str,
    visible: bool,
}

struct Fake {
    paystack: bool,
    first_post: FirstPost,
    transfers: Vec<Transfer>,
    posts: usize,
    gets: usize,
    /// When set, every lookup answers this transfer object (Paystack's `data`): a provider
    /// whose record under the reference is not the payout's.
    lookup_says: Option<Value>,
}

type Shared = Arc<Mutex<Fake>>;

async fn post_transfer(State(fake): State<Shared>, body: String) -> (StatusCode, String) {
    let v: Value = serde_json::from_str(&body).unwrap();
    let reference = v["reference"].as_str().unwrap().to_owned();
    let mut f = fake.lock().unwrap();
    f.posts += 1;
    // A reference it holds: refused as a duplicate, in the provider's own words.
    if f.transfers.iter().any(|t| t.reference == reference) {
        let refusal = if f.paystack {
            json!({"status": false, "message": "Please provide a unique reference. Reference already exists on a transfer",
                   "type": "validation_error", "code": "duplicate_transfer_reference"})
        } else {
            json!({"error": "duplicate_reference", "message": "a transfer exists under this reference"})
        };
        return (StatusCode::BAD_REQUEST, refusal.to_string());
    }
    if f.first_post != FirstPost::Fail500 {
        let visible = f.first_post == FirstPost::Answer;
        f.transfers.push(Transfer {
            reference: reference.clone(),
            amount: v["amount"].as_i64().unwrap(),
            status: "pending",
            visible,
        });
    }
    match f.first_post {
        FirstPost::Answer if f.paystack => (
            StatusCode::OK,
            json!({"status": true, "data": {"reference": reference, "status": "pending", "recipient": 77}})
                .to_string(),
        ),
        FirstPost::Answer => (
            StatusCode::OK,
            json!({"reference": reference, "status": "pending"}).to_string(),
        ),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"message": "internal error"}).to_string(),
        ),
    }
}

async fn get_transfer(
    State(fake): State<Shared>,
    Path(reference): Path<String>,
) -> (StatusCode, String) {
    let mut f = fake.lock().unwrap();
    f.gets += 1;
    if let Some(data) = f.lookup_says.clone() {
        let mut data = data;
        data["reference"] = Value::from(reference);
        return (
            StatusCode::OK,
            json!({"status": true, "data": data}).to_string(),
        );
    }
    match f.transfers.iter().find(|t| t.reference == reference && t.visible) {
        Some(t) if f.paystack => (
            StatusCode::OK,
            json!({"status": true, "data": {"reference": reference, "status": t.status, "amount": t.amount,
                   "currency": "NGN", "recipient": {"recipient_code": "RCP_ours"}}})
            .to_string(),
        ),
        Some(t) => (
            StatusCode::OK,
            json!({"reference": reference, "status": t.status}).to_string(),
        ),
        None => (StatusCode::NOT_FOUND, "{}".into()),
    }
}

async fn fake(paystack: bool, first_post: FirstPost) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(Fake {
        paystack,
        first_post,
        transfers: Vec::new(),
        posts: 0,
        gets: 0,
        lookup_says: None,
    }));
    let app = axum::Router::new()
        .route("/transfers", axum::routing::post(post_transfer))
        .route("/transfers/{reference}", axum::routing::get(get_transfer))
        .route("/transfer", axum::routing::post(post_transfer))
        .route(
            "/transfer/verify/{reference}",
            axum::routing::get(get_transfer),
        )
        .with_state(shared.clone());
    (serve_fake(app).await, shared)
}

fn counts(f: &Shared) -> (usize, usize) {
    let f = f.lock().unwrap();
    (f.posts, f.transfers.len())
}

// ------------------------------------------------------------------------------ payhook

fn config_with(url: &str, extra: &[(&str, &str)]) -> Config {
    let url = url.to_owned();
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_lookup(move |name| {
        if let Some((_, v)) = extra.iter().find(|(k, _)| k == name) {
            return Some(v.clone());
        }
        match name {
            "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
            "PAYHOOK_GENERIC_API_URL" | "PAYHOOK_PAYSTACK_API_URL" => Some(url.clone()),
            "PAYHOOK_GENERIC_API_KEY" | "PAYHOOK_PAYSTACK_API_KEY" => Some("k_test".into()),
            "PAYHOOK_PAYSTACK_SECRETS" => Some(PAYSTACK_SECRET.into()),
            "PAYHOOK_LEASE_MS" => Some(LEASE_MS.to_string()),
            "PAYHOOK_PROVIDER_TIMEOUT_MS" => Some(BOUND_MS.to_string()),
            "PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS" => Some(VISIBILITY_MS.to_string()),
            _ => None,
        }
    })
    .unwrap()
}

fn payout_app(store: DynamoStore, config: &Config) -> Arc<App<DynamoStore>> {
    common::payout_app(store, config, TOKEN)
}

#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
}

async fn pay(app: &Arc<App<DynamoStore>>, key: &str, body: &Value) -> Answer {
    let req = Request::post("/payouts")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = payhook::http::router(app.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn generic_payout(account: &str, amount: i64) -> Value {
    json!({"provider": "generic", "account": account, "amount": amount, "currency": "NGN",
           "destination": {"bank": "058", "account_number": "0123456789"}})
}

fn paystack_payout(account: &str, amount: i64) -> Value {
    json!({"provider": "paystack", "account": account, "amount": amount, "currency": "NGN",
           "destination": {"recipient": "RCP_ours"}})
}

async fn balance(store: &DynamoStore, account: &str) -> i64 {
    let b = store
        .balance(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    b.balances
        .get(&Currency::parse("NGN").unwrap())
        .copied()
        .unwrap_or(0)
}

async fn fund(app: &Arc<App<DynamoStore>>, account: &str, amount: i64) {
    let reference = format!("pay_{account}");
    let body = payment_body(
        &format!("evt_{account}"),
        &reference,
        account,
        amount,
        "NGN",
    );
    assert_eq!(send(app, signed(&body)).await.status, 200);
}

/// Retries `key` until `done` holds for an answer, at most `for_ms`; the last answer.
async fn retry_until(
    app: &Arc<App<DynamoStore>>,
    key: &str,
    body: &Value,
    for_ms: u64,
    done: impl Fn(&Answer) -> bool,
) -> Answer {
    let until = Instant::now() + Duration::from_millis(for_ms);
    loop {
        let a = pay(app, key, body).await;
        if done(&a) || Instant::now() > until {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long a send's fence and the generic window last, with the store clock's second.
fn past_window_ms() -> u64 {
    (BOUND_MS + payhook::payouts::calls::CALL_MARGIN_MS + VISIBILITY_MS + 1_000) as u64
}

/// The payouts a person must look at now (store time), and why.
async fn unsettled(store: &DynamoStore) -> Vec<(String, String)> {
    let now = payhook::idempotency::Claims::now_ms(store);
    payhook::read::unsettled_payouts(store, now, 86_400_000, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.payout.payout.to_string(), u.why.to_owned()))
        .collect()
}

// ------------------------------------------------------------------------------ the tests

#[tokio::test]
async fn case2_a_resend_refused_as_a_duplicate_reference_is_never_failed_and_never_resent() {
    // GIVEN a provider that takes the first POST but answers 500, keeps the transfer
    // invisible to its lookup past the window, and refuses a second POST under the
    // reference as a duplicate (as Paystack and Flutterwave do)
    let store = store("pw_duplicate").await;
    let (url, fake) = fake(false, FirstPost::TakeThen500).await;
    fake.lock().unwrap().first_post = FirstPost::TakeThen500;
    let app = payout_app(store.clone(), &config_with(&url, &[]));
    fund(&app, "wallet_d", 1_000).await;

    // WHEN a payout of all of it is sent: the answer is unknown
    let body = generic_payout("wallet_d", 1_000);
    let a = pay(&app, "dup-1", &body).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (202, Some("sent")),
        "{a:?}"
    );
    let payout = a.body["payout"].as_str().unwrap().to_owned();
    // the transfer is taken, and invisible from now on
    fake.lock().unwrap().transfers[0].visible = false;
    // AND retries past the window resend once under the same reference: refused as a duplicate
    let b = retry_until(&app, "dup-1", &body, 20_000, |_| counts(&fake).0 >= 2).await;
    assert_eq!(counts(&fake), (2, 1), "one resend, one transfer held");
    assert_eq!(b.body["status"].as_str(), Some("sent"), "{b:?}");
    // AND retries long after the resend's own window still change nothing
    tokio::time::sleep(Duration::from_millis(past_window_ms())).await;
    let c = retry_until(&app, "dup-1", &body, 2_000, |_| false).await;

    // THEN the payout is still sent (the provider holds it): not failed, not credited back,
    // never sent a third time
    assert_eq!(
        (c.status, c.body["status"].as_str()),
        (201, Some("sent")),
        "{c:?}"
    );
    assert_eq!(counts(&fake), (2, 1));
    assert_eq!(
        balance(&store, "wallet_d").await,
        0,
        "the money the provider holds stays reserved"
    );
    // AND a second payout cannot spend the same money
    let d = pay(&app, "dup-2", &body).await;
    assert_eq!(
        (d.status, d.body["error"].as_str()),
        (422, Some("insufficient_funds")),
        "{d:?}"
    );
    assert_eq!(counts(&fake).0, 2);

    // WHEN the provider finally shows the transfer, paid
    {
        let mut f = fake.lock().unwrap();
        f.transfers[0].visible = true;
        f.transfers[0].status = "success";
    }
    // and says so by webhook (an accepted payout waits for its word: retries do not ask)
    let hook = event_body(
        "evt_dup_paid",
        "transfer.succeeded",
        json!({"reference": payout, "amount": 1_000, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&hook)).await.status, 200);
    let e = pay(&app, "dup-1", &body).await;
    // THEN it is paid, once, and the account was debited once
    assert_eq!(e.body["status"].as_str(), Some("paid"), "{e:?}");
    assert_eq!(balance(&store, "wallet_d").await, 0);
    assert_eq!(counts(&fake), (2, 1));
    assert!(unsettled(&store).await.iter().all(|(p, _)| *p != payout));
}

#[tokio::test]
async fn case5_a_lookup_about_other_money_or_another_recipient_moves_nothing_and_calls_a_person() {
    // GIVEN a Paystack payout of 1,000 NGN whose POST answered 500 (took nothing), and a
    // verify answer saying `success` for 1 kobo to another recipient
    let store = store("pw_lookup").await;
    let (url, fake) = fake(true, FirstPost::Fail500).await;
    let app = payout_app(store.clone(), &config_with(&url, &[]));
    fund(&app, "wallet_p", 100_000).await;
    let body = paystack_payout("wallet_p", 100_000);
    let a = pay(&app, "look-1", &body).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (202, Some("sent")),
        "{a:?}"
    );
    let payout = a.body["payout"].as_str().unwrap().to_owned();
    fake.lock().unwrap().lookup_says =
        Some(json!({"status": "success", "amount": 1, "currency": "NGN",
        "recipient": {"recipient_code": "RCP_other"}}));

    // WHEN the key is retried past the fence and the provider is asked
    let b = retry_until(&app, "look-1", &body, 10_000, |_| {
        fake.lock().unwrap().gets >= 1
    })
    .await;
    // AND again, long past the send's window
    tokio::time::sleep(Duration::from_millis(past_window_ms())).await;
    let c = pay(&app, "look-1", &body).await;

    // THEN the payout is not paid: still sent, unknown, debited once, never resent
    for x in [&b, &c] {
        assert_eq!(
            (x.status, x.body["status"].as_str()),
            (202, Some("sent")),
            "{x:?}"
        );
    }
    assert_eq!(
        counts(&fake).0,
        1,
        "no resend under a reference the provider says holds something else"
    );
    assert_eq!(balance(&store, "wallet_p").await, 0);
    // AND a person is asked to look, at once
    let people = unsettled(&store).await;
    let why = people
        .iter()
        .find(|(p, _)| *p == payout)
        .map(|(_, w)| w.clone());
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("other money or another recipient")),
        "{people:?}"
    );

    // WHEN the same words come as a signed webhook: a conflict too (the one judge)
    let p =
        payhook::providers::paystack::Paystack::from_env_value(PAYSTACK_SECRET, "account").unwrap();
    let hook = json!({"event": "transfer.success", "data": {"reference": payout, "amount": 1, "currency": "NGN",
        "status": "success", "recipient": {"recipient_code": "RCP_other"}}})
    .to_string();
    let req = Request::post("/webhooks/paystack")
        .header("content-type", "application/json")
        .header("x-paystack-signature", p.sign(hook.as_bytes()))
        .body(Body::from(hook.clone()))
        .unwrap();
    let w = send(&app, req).await;
    assert_eq!(w.status, 200);
    assert!(w.body.contains("\"conflict\""), "{}", w.body);
    // AND the payout's own word, when the provider gives it, still settles it
    fake.lock().unwrap().lookup_says = Some(
        json!({"status": "success", "amount": 100_000, "currency": "NGN",
        "recipient": {"recipient_code": "RCP_ours"}}),
    );
    let d = retry_until(&app, "look-1", &body, 10_000, |a| {
        a.body["status"] == "paid"
    })
    .await;
    assert_eq!(d.body["status"].as_str(), Some("paid"), "{d:?}");
    assert_eq!(balance(&store, "wallet_p").await, 0);
    assert_eq!(counts(&fake).0, 1);
}

#[tokio::test]
async fn case4_no_configuration_that_reserves_and_never_sends() {
    // GIVEN the three configurations of the red team (and one that fits)
    let (url, fake) = fake(false, FirstPost::Answer).await;
    for (name, value) in [
        ("PAYHOOK_LEASE_MS", "5000"),
        ("PAYHOOK_PROVIDER_TIMEOUT_MS", "24000"),
        ("PAYHOOK_MAX_LEASE_MS", "6000"),
    ] {
        // Each with the default call bound (5 s) unless it is the one set.
        let mut extra = vec![(name, value)];
        if name != "PAYHOOK_PROVIDER_TIMEOUT_MS" {
            extra.push(("PAYHOOK_PROVIDER_TIMEOUT_MS", "5000"));
        }
        let config = config_with(&url, &extra);
        // THEN a process that pays out refuses them, with the numbers and the rule
        let why = config.check_payout_timing(false).unwrap_err().to_string();
        assert!(
            why.contains("no transfer call can start") && why.contains(" ms"),
            "{name}: {why}"
        );
        // AND one built anyway serves no payouts (503): nothing is reserved
        let store = store(&format!("pw_timing_{}", name.to_ascii_lowercase())).await;
        let app = payout_app(store.clone(), &config);
        fund(&app, "wallet_t", 1_000).await;
        let a = pay(&app, "t-1", &generic_payout("wallet_t", 100)).await;
        assert_eq!(a.status, 503, "{name}: {a:?}");
        assert_eq!(balance(&store, "wallet_t").await, 1_000, "{name}");
    }
    assert_eq!(counts(&fake).0, 0);
    // AND the defaults fit
    assert!(
        config_with(&url, &[("PAYHOOK_PROVIDER_TIMEOUT_MS", "5000")])
            .check_payout_timing(false)
            .is_ok()
    );
}

#[tokio::test]
async fn case4_a_request_without_time_for_a_call_reserves_nothing_and_a_stranded_reservation_calls_a_person(
) {
    // GIVEN a funded account
    let store = store("pw_no_time").await;
    let (url, fake) = fake(false, FirstPost::Answer).await;
    let config = config_with(&url, &[]);
    let app = payout_app(store.clone(), &config);
    fund(&app, "wallet_n", 1_000).await;
    let pipeline = payhook::pipeline::Pipeline::new(store.clone());
    let api = payhook::reconcile::HttpProviderApi::new(config.api_endpoints.clone())
        .unwrap()
        .with_timeout(Duration::from_millis(BOUND_MS as u64));
    let key = payhook::payouts::RequestKey::parse("late-1").unwrap();
    let supports = |_| true;
    let limits = payhook::payouts::Limits {
        max_amount_minor: 1_000_000,
        supports: &supports,
    };
    let request = payhook::payouts::PayoutRequest::parse(
        generic_payout("wallet_n", 400).to_string().as_bytes(),
        limits,
    )
    .unwrap();
    // WHEN an invocation near its deadline asks (a lease that cannot hold a call)
    let call = |lease_ms| payhook::pipeline::PayoutCall {
        caller: "test",
        key: &key,
        request: &request,
        lease_ms,
        aliases: &[],
    };
    let a = pipeline.payout(&api, call(1_500)).await.unwrap();
    // THEN it is refused, retryable, before anything is written or debited
    assert_eq!(a.status, 503, "{a:?}");
    assert!(a.body.contains("no_time_for_a_call"));
    assert_eq!(balance(&store, "wallet_n").await, 1_000);
    assert_eq!(counts(&fake).0, 0);

    // WHEN a payout is reserved by a process that cannot call its provider (its API not
    // configured there), so nothing sends it
    let nowhere = payhook::reconcile::HttpProviderApi::new(Vec::new()).unwrap();
    let b = pipeline.payout(&nowhere, call(LEASE_MS)).await.unwrap();
    assert_eq!(
        b.payout_status.map(|s| s.as_str()),
        Some("reserved"),
        "{b:?}"
    );
    let payout = b.payout.unwrap().to_string();
    // THEN a person is asked to look as soon as a request's time has passed, not after a day
    let now = payhook::idempotency::Claims::now_ms(&store);
    let at = |ms| payhook::read::unsettled_payouts(&store, ms, 86_400_000, 100);
    assert!(at(now)
        .await
        .unwrap()
        .iter()
        .all(|u| u.payout.payout.as_str() != payout));
    let late = now
        + payhook::payouts::calls::REQUEST_BUDGET_MS
        + payhook::payouts::calls::CALL_MARGIN_MS
        + 1_000;
    let listed = at(late).await.unwrap();
    assert!(
        listed
            .iter()
            .any(|u| u.payout.payout.as_str() == payout && u.why.contains("never sent")),
        "{listed:?}"
    );
}
