//! Stripe, Paystack and Flutterwave end to end through the real router, against dynalite: every
//! sample in events/<provider>/ is re-signed the way `payhook sign` does and applied; forged and
//! tampered twins are refused without writing; hostile input gets a clear JSON error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use common::{counts, now_s, send, store, Resp};
use payhook::cli::client::{resign_file, sign_headers};
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, ProviderId};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use payhook::runtime::build_app;
use serde_json::Value;

const STRIPE: &str = "whsec_payhook_tests_stripe_endpoint_secret";
const STRIPE_OLD: &str = "whsec_payhook_tests_stripe_rotated_out";
const PAYSTACK: &str = "sk_test_payhook_tests_paystack_secret_key";
const FW_V3: &str = "payhook-tests-flutterwave-v3-hash";
const FW_V4: &str = "payhook-tests-flutterwave-v4-secret";
const RAZORPAY: &str = "payhook-tests-razorpay-webhook-secret";
const RAZORPAY_OLD: &str = "payhook-tests-razorpay-rotated-out";

fn lookup(pairs: Vec<(&'static str, String)>) -> Config {
    Config::from_lookup(move |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()))
        .unwrap()
}

/// The configuration the function runs with: each provider's current secret first (the one
/// `payhook sign` uses), an older one still accepted.
fn config() -> Config {
    lookup(vec![
        ("PAYHOOK_STRIPE_SECRETS", format!("{STRIPE} {STRIPE_OLD}")),
        ("PAYHOOK_PAYSTACK_SECRETS", PAYSTACK.to_owned()),
        ("PAYHOOK_FLUTTERWAVE_SECRETS", FW_V3.to_owned()),
        ("PAYHOOK_FLUTTERWAVE_V4_SECRETS", FW_V4.to_owned()),
        (
            "PAYHOOK_RAZORPAY_SECRETS",
            format!("{RAZORPAY} {RAZORPAY_OLD}"),
        ),
    ])
}

/// A forger's configuration: well-formed secrets that are not ours.
fn forger() -> Config {
    lookup(vec![
        (
            "PAYHOOK_STRIPE_SECRETS",
            "whsec_not_the_endpoint_secret".to_owned(),
        ),
        (
            "PAYHOOK_PAYSTACK_SECRETS",
            "sk_test_not_the_secret_key".to_owned(),
        ),
        ("PAYHOOK_FLUTTERWAVE_SECRETS", "not-the-v3-hash".to_owned()),
        (
            "PAYHOOK_FLUTTERWAVE_V4_SECRETS",
            "not-the-v4-secret".to_owned(),
        ),
        (
            "PAYHOOK_RAZORPAY_SECRETS",
            "not-the-razorpay-secret".to_owned(),
        ),
    ])
}

fn app(store: DynamoStore) -> Arc<App<DynamoStore>> {
    build_app(&config(), store)
}

fn events_dir(provider: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("events")
        .join(provider)
}

/// The request an API Gateway v2 event describes.
fn request(event: &Value) -> Request<Body> {
    let path = event["rawPath"].as_str().unwrap();
    let mut req = Request::post(path);
    for (k, v) in event["headers"].as_object().unwrap() {
        req = req.header(k.as_str(), v.as_str().unwrap());
    }
    req.body(Body::from(event["body"].as_str().unwrap().to_owned()))
        .unwrap()
}

/// `event` with `body` and the headers `config` signs it with.
fn resigned(event: &Value, body: &str, config: &Config, provider: ProviderId) -> Value {
    let mut event = event.clone();
    let id = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|b| b["id"].as_str().map(str::to_owned));
    let headers = sign_headers(
        provider,
        config,
        body.as_bytes(),
        id.as_deref().unwrap_or("msg"),
        now_s(),
    )
    .unwrap();
    for (k, v) in headers {
        event["headers"][k] = Value::String(v);
    }
    event["body"] = Value::String(body.to_owned());
    event
}

/// The same delivery with its body changed after signing.
fn tampered(event: &Value) -> Value {
    let body = event["body"].as_str().unwrap();
    let changed = if body.contains("wallet_42") {
        body.replacen("wallet_42", "wallet_66", 1)
    } else {
        body.replacen('{', "{ ", 1)
    };
    let mut event = event.clone();
    event["body"] = Value::String(changed);
    event
}

/// One sample and what applying it must answer: the JSON `status` and whether it is a replay.
struct Step {
    file: &'static str,
    status: &'static str,
    replayed: bool,
}

const fn step(file: &'static str, status: &'static str, replayed: bool) -> Step {
    Step {
        file,
        status,
        replayed,
    }
}

/// Sends every sample of `provider` in order: first a tampered and a forged twin (401, nothing
/// written), then the re-signed sample, whose answer must be `step`'s.
async fn run_samples(
    provider: ProviderId,
    steps: &[Step],
    app: &Arc<App<DynamoStore>>,
    store: &DynamoStore,
) {
    let dir = events_dir(provider.as_str());
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let mut listed: Vec<String> = steps.iter().map(|s| s.file.to_owned()).collect();
    listed.sort();
    listed.dedup();
    assert_eq!(
        files,
        listed,
        "every sample in {} must be exercised",
        dir.display()
    );

    for s in steps {
        let path = dir.join(s.file);
        let event = resign_file(&path, &config()).unwrap();
        let before = counts(store).await;
        for (what, twin) in [
            ("tampered", tampered(&event)),
            (
                "forged",
                resigned(&event, event["body"].as_str().unwrap(), &forger(), provider),
            ),
        ] {
            let r = send(app, request(&twin)).await;
            assert_eq!(r.status, 401, "{what} {}: {}", s.file, r.body);
            assert_eq!(r.json()["error"], "invalid_signature");
        }
        assert_eq!(
            counts(store).await,
            before,
            "{}: a refused twin wrote something",
            s.file
        );
        let r = send(app, request(&event)).await;
        assert_eq!(r.status, 200, "{}: {}", s.file, r.body);
        assert_eq!(r.json()["status"], s.status, "{}: {}", s.file, r.body);
        assert_eq!(r.replayed, s.replayed, "{}: {}", s.file, r.body);
    }
}

async fn assert_balance(store: &DynamoStore, expected: &[(&str, i64)], entries: u64) {
    let b = store
        .balance(&AccountId::parse("wallet_42").unwrap())
        .await
        .unwrap();
    for (cur, amount) in expected {
        assert_eq!(
            b.balances.get(&Currency::parse(cur).unwrap()),
            Some(amount),
            "{cur}: {b:?}"
        );
    }
    assert_eq!(b.entries, entries, "{b:?}");
}

#[tokio::test]
async fn stripe_samples_apply_and_the_charge_and_intent_credit_once() {
    let store = store("stripe").await;
    let app = app(store.clone());
    let steps = [
        step("payment_intent_processing.json", "applied", false),
        step("charge_succeeded.json", "applied", false),
        // The intent's own success is the same money movement: replayed, not credited again.
        step("payment_intent_succeeded.json", "applied", true),
        step("charge_refunded.json", "applied", false),
        step("refund_created.json", "applied", false),
        // An inquiry withdraws nothing; a chargeback withdraws what its balance transaction
        // moved (the whole 4,999, more than the 3,499 left: the balance goes below zero), and
        // the won dispute's reinstatement gives it back.
        step("charge_dispute_created_inquiry.json", "ignored", false),
        step("charge_dispute_funds_withdrawn.json", "applied", false),
        step("charge_dispute_funds_reinstated.json", "applied", false),
        // A declined attempt leaves the intent open: logged, not FAILED.
        step("payment_intent_payment_failed.json", "ignored", false),
        step("payment_intent_canceled.json", "applied", false),
        // Settlements of a payout these tables never sent: acknowledged, nothing moves
        // (tests/it/payouts.rs settles real ones; the mapping is unit-tested beside the adapter).
        step("transfer_created.json", "ignored", false),
        step("transfer_reversed.json", "ignored", false),
    ];
    run_samples(ProviderId::STRIPE, &steps, &app, &store).await;
    assert_balance(&store, &[("USD", 4999 - 1000 - 500 - 4999 + 4999)], 5).await;
}

#[tokio::test]
async fn paystack_samples_apply_and_a_replayed_request_is_a_replay() {
    let store = store("paystack").await;
    let app = app(store.clone());
    let steps = [
        step("charge_success.json", "applied", false),
        // No timestamp: the same signed request again is stopped by the claim.
        step("charge_success.json", "applied", true),
        step("refund_pending.json", "ignored", false),
        step("refund_processed.json", "applied", false),
        step("refund_failed.json", "ignored", false),
        // Paystack takes a dispute's money when it is resolved against the merchant.
        step("charge_dispute_create.json", "ignored", false),
        step("charge_dispute_resolve.json", "applied", false),
        step("transfer_success.json", "ignored", false),
        step("transfer_failed.json", "ignored", false),
        step("transfer_reversed.json", "ignored", false),
    ];
    run_samples(ProviderId::PAYSTACK, &steps, &app, &store).await;
    assert_balance(&store, &[("NGN", 500_000 - 200_000 - 300_000)], 3).await;
}

#[tokio::test]
async fn flutterwave_samples_apply_in_both_schemes() {
    let store = store("flutterwave").await;
    let app = app(store.clone());
    let steps = [
        step("charge_completed_successful.json", "applied", false),
        step("charge_completed_pending.json", "applied", false),
        step("charge_completed_failed.json", "applied", false),
        step("charge_completed_v4.json", "applied", false),
        step("transfer_completed_successful.json", "ignored", false),
        step("transfer_completed_failed.json", "ignored", false),
    ];
    run_samples(ProviderId::FLUTTERWAVE, &steps, &app, &store).await;
    assert_balance(&store, &[("NGN", 125_050), ("USD", 2075)], 2).await;

    // A v3 delivery with only `verif-hash`: the right hash is accepted (a duplicate here), a
    // wrong one refused.
    let mut v3 = resign_file(
        &events_dir("flutterwave").join("charge_completed_successful.json"),
        &config(),
    )
    .unwrap();
    v3["headers"]
        .as_object_mut()
        .unwrap()
        .remove("flutterwave-signature");
    let r = send(&app, request(&v3)).await;
    assert_eq!((r.status, r.replayed), (200, true), "{}", r.body);
    v3["headers"]["verif-hash"] = Value::String("not-the-v3-hash".into());
    let before = counts(&store).await;
    assert_eq!(send(&app, request(&v3)).await.status, 401);
    assert_eq!(counts(&store).await, before);
}

// ------------------------------------------------------------------------------------- hardening

fn paystack_request(body: Vec<u8>, signatures: &[String]) -> Request<Body> {
    let mut req = Request::post("/webhooks/paystack").header("content-type", "application/json");
    for s in signatures {
        req = req.header("x-paystack-signature", s.as_str());
    }
    req.body(Body::from(body)).unwrap()
}

fn paystack_sig(body: &[u8]) -> String {
    sign_headers(ProviderId::PAYSTACK, &config(), body, "", 0)
        .unwrap()
        .remove(0)
        .1
}

fn signed_paystack(body: &[u8]) -> Request<Body> {
    paystack_request(body.to_vec(), &[paystack_sig(body)])
}

const CHARGE: &str = r#"{"event":"charge.success","data":{"id":1,"status":"success","reference":"ps_hard_1","amount":AMOUNT,"currency":"CUR","metadata":{"account":"wallet_42"}}}"#;

fn charge(amount: &str, currency: &str) -> Vec<u8> {
    CHARGE
        .replace("AMOUNT", amount)
        .replace("CUR", currency)
        .into_bytes()
}

/// What a hostile body must get: (case, body, status, error code, field named).
type Refusal = (
    &'static str,
    Vec<u8>,
    u16,
    &'static str,
    Option<&'static str>,
);

fn assert_refused(what: &str, r: &Resp, status: u16, error: &str, field: Option<&str>) {
    assert_eq!(r.status, status, "{what}: {}", r.body);
    let json = r.json();
    assert_eq!(json["error"], error, "{what}: {}", r.body);
    assert!(
        json["message"].is_string() || status == 413,
        "{what}: {}",
        r.body
    );
    if let Some(field) = field {
        assert_eq!(json["field"], field, "{what}: {}", r.body);
    }
}

#[tokio::test]
async fn hostile_paystack_input_gets_a_clear_error_and_writes_nothing() {
    let store = store("hostile").await;
    let app = app(store.clone());
    let good = charge("500000", "NGN");
    let mut huge = b"{\"event\":\"charge.success\",\"pad\":\"".to_vec();
    huge.resize(300 * 1024, b'a');
    huge.extend_from_slice(b"\"}");
    let payload_cases: Vec<Refusal> = vec![
        ("empty body", Vec::new(), 400, "malformed_json", None),
        (
            "truncated JSON",
            good[..good.len() / 2].to_vec(),
            400,
            "malformed_json",
            None,
        ),
        (
            "not UTF-8",
            b"{\"event\":\"charge.success\xff\"}".to_vec(),
            400,
            "malformed_json",
            None,
        ),
        (
            "duplicate key",
            br#"{"event":"charge.success","event":"charge.success","data":{}}"#.to_vec(),
            400,
            "malformed_json",
            None,
        ),
        (
            "number beyond i64",
            charge("99999999999999999999", "NGN"),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            "fractional amount",
            charge("5000.5", "NGN"),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            "negative amount",
            charge("-500", "NGN"),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            "zero amount",
            charge("0", "NGN"),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            "unknown currency",
            charge("500000", "XQQ"),
            400,
            "invalid_field",
            Some("data.currency"),
        ),
        ("oversized", huge, 413, "payload_too_large", None),
    ];
    for (what, body, status, error, field) in payload_cases {
        let r = send(&app, signed_paystack(&body)).await;
        assert_refused(what, &r, status, error, field);
    }
    let sig = paystack_sig(&good);
    let header_cases: Vec<(&str, Vec<String>)> = vec![
        ("missing header", vec![]),
        ("repeated header", vec![sig.clone(), sig.clone()]),
        ("signature of wrong length", vec![sig[..126].to_owned()]),
        ("signature not hex", vec![format!("zz{}", &sig[2..])]),
        (
            "signature base64 instead of hex",
            vec!["q83vEjRWeJA=".into()],
        ),
        (
            "valid signature over another body",
            vec![paystack_sig(&charge("500001", "NGN"))],
        ),
    ];
    for (what, sigs) in header_cases {
        let r = send(&app, paystack_request(good.clone(), &sigs)).await;
        assert_refused(what, &r, 401, "invalid_signature", None);
    }
    assert_eq!(
        counts(&store).await,
        [0, 0, 0, 0],
        "a refused request wrote something"
    );
    // And the well-formed, well-signed one still applies.
    let r = send(&app, signed_paystack(&good)).await;
    assert_eq!(
        (r.status, r.json()["status"].clone()),
        (200, Value::from("applied")),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn stripe_refuses_old_and_future_timestamps() {
    let store = store("stripe-ts").await;
    let app = app(store.clone());
    let event = resign_file(
        &events_dir("stripe").join("charge_succeeded.json"),
        &config(),
    )
    .unwrap();
    let body = event["body"].as_str().unwrap();
    // Past the 300 s tolerance each way; the future one by a minute, so the time a loaded
    // machine takes before the check (which brings a future stamp closer) cannot bring it back
    // inside. The exact edge is the adapters' unit tests', on a fixed clock.
    for (what, ts) in [("stale", now_s() - 301), ("future", now_s() + 360)] {
        let sig = sign_headers(ProviderId::STRIPE, &config(), body.as_bytes(), "", ts)
            .unwrap()
            .remove(0)
            .1;
        let mut e = event.clone();
        e["headers"]["stripe-signature"] = Value::String(sig);
        let r = send(&app, request(&e)).await;
        assert_refused(what, &r, 401, "invalid_signature", None);
    }
    assert_eq!(counts(&store).await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn flutterwave_amounts_that_do_not_fit_the_currency_are_refused() {
    let store = store("fw-amounts").await;
    let app = app(store.clone());
    let event = resign_file(
        &events_dir("flutterwave").join("charge_completed_successful.json"),
        &config(),
    )
    .unwrap();
    let body = event["body"].as_str().unwrap();
    for (what, amount, currency, field) in [
        ("more decimals than NGN has", "10.005", "NGN", "data.amount"),
        (
            "a fraction of a zero-decimal currency",
            "1.5",
            "UGX",
            "data.amount",
        ),
        ("an exponent", "1.2e3", "NGN", "data.amount"),
        ("a quoted amount", "\"1250.5\"", "NGN", "data.amount"),
        (
            "beyond i64 minor units",
            "92233720368547758.08",
            "NGN",
            "data.amount",
        ),
        ("a lower-case currency", "1250.5", "ngn", "data.currency"),
    ] {
        let changed = body
            .replace(r#""amount":1250.5"#, &format!(r#""amount":{amount}"#))
            .replace(
                r#""currency":"NGN""#,
                &format!(r#""currency":"{currency}""#),
            );
        let r = send(
            &app,
            request(&resigned(
                &event,
                &changed,
                &config(),
                ProviderId::FLUTTERWAVE,
            )),
        )
        .await;
        assert_refused(what, &r, 400, "invalid_field", Some(field));
    }
    assert_eq!(counts(&store).await, [0, 0, 0, 0]);
}

#[tokio::test]
async fn a_provider_with_an_empty_or_unusable_secret_is_refused_not_open() {
    let store = store("no-secret").await;
    let config = lookup(vec![
        ("PAYHOOK_PAYSTACK_SECRETS", String::new()),
        (
            "PAYHOOK_STRIPE_SECRETS",
            "sk_live_pasted_by_mistake".to_owned(),
        ),
    ]);
    let app = build_app(&config, store.clone());
    for provider in ["paystack", "stripe", "flutterwave"] {
        let req = Request::post(format!("/webhooks/{provider}"))
            .body(Body::from("{}"))
            .unwrap();
        let r = send(&app, req).await;
        assert_refused(provider, &r, 503, "provider_not_configured", None);
    }
    assert_eq!(counts(&store).await, [0, 0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn razorpay_samples_apply_and_captured_and_order_paid_credit_once() {
    let store = store("razorpay").await;
    let app = app(store.clone());
    let steps = [
        step("payment_captured.json", "applied", false),
        // order.paid carries the same payment: the same key, so a replay of its answer.
        step("order_paid.json", "applied", true),
        step("payment_failed.json", "applied", false),
        step("refund_processed.json", "applied", false),
        // A refund that failed before it was applied: voided, nothing moves.
        step("refund_failed.json", "voided", false),
    ];
    run_samples(payhook::domain::ProviderId::RAZORPAY, &steps, &app, &store).await;
    assert_balance(&store, &[("INR", 50_000 - 20_000)], 2).await;

    // The same capture, signed with the rotated-out secret, 16 times at once: one credit.
    let store = common::store("razorpay_concurrent").await;
    let app = build_app(&config(), store.clone());
    let event = resign_file(
        &events_dir("razorpay").join("payment_captured.json"),
        &config(),
    )
    .unwrap();
    let body = event["body"].as_str().unwrap().to_owned();
    let sig = hex::encode(payhook::providers::signature::hmac_sha256(
        RAZORPAY_OLD.as_bytes(),
        &[body.as_bytes()],
    ));
    let tasks = (0..16).map(|_| {
        let (app, body, sig) = (app.clone(), body.clone(), sig.clone());
        tokio::spawn(async move {
            let req = Request::post("/webhooks/razorpay")
                .header("content-type", "application/json")
                .header("x-razorpay-signature", sig)
                .header("x-razorpay-event-id", "evt_concurrent")
                .body(Body::from(body))
                .unwrap();
            common::send(&app, req).await.status
        })
    });
    let statuses: Vec<u16> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 409)),
        "{statuses:?}"
    );
    assert_balance(&store, &[("INR", 50_000)], 1).await;
}
