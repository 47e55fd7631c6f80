//! Adyen batches through the real router and pipeline against dynalite: each item its own
//! movement; `[accepted]` only when every verified item is decided, so a batch with an item
//! that could not be decided is retried and the retry applies only what is missing; a forged
//! item is refused alone; a batch with no verifiable item is 401; concurrent redeliveries of a
//! batch move money once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use common::{counts, send, store};
use payhook::cli::client::resign_file;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, Money, ProviderId, Reference};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use payhook::payments::{ExpectedPayment, Payments};
use payhook::providers::adyen::Adyen;
use payhook::providers::Provider;
use serde_json::{json, Value};

const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const OLD_KEY: &str = "66B61474A0AA3736BA8789EDC6D6CD9EBA0C4F414A554E32A407F849C045C69D";
const WRONG_KEY: &str = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF";
const BASIC: &str = "adyen-notifier:correct-horse-battery";

fn app(store: DynamoStore) -> Arc<App<DynamoStore>> {
    let config = Config::from_lookup(|n| match n {
        "PAYHOOK_ADYEN_SECRETS" => Some(format!("{KEY} {OLD_KEY}")),
        _ => None,
    })
    .unwrap();
    let mut app = payhook::runtime::build_app(&config, store);
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    app
}

/// One item, signed with `key`.
fn item(
    key: &str,
    code: &str,
    psp: &str,
    merchant_ref: &str,
    original: Option<&str>,
    value: i64,
) -> Value {
    let mut item = json!({"amount": {"currency": "EUR", "value": value}, "eventCode": code,
        "eventDate": "2026-12-03T10:00:00+01:00", "merchantAccountCode": "AcmeECOM",
        "merchantReference": merchant_ref, "pspReference": psp, "success": "true",
        "additionalData": {}});
    if let Some(o) = original {
        item["originalReference"] = Value::from(o);
    }
    let signer = Adyen::new(key, None, "account", false).unwrap();
    item["additionalData"]["hmacSignature"] = Value::from(signer.sign_item(&item));
    item
}

fn batch(items: &[Value]) -> Request<Body> {
    let body = json!({"live": "false", "notificationItems": items.iter()
        .map(|i| json!({"NotificationRequestItem": i})).collect::<Vec<_>>()});
    Request::post("/webhooks/adyen")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn expect(store: &DynamoStore, reference: &str, account: &str, value: i64) {
    store
        .register(&ExpectedPayment {
            provider: ProviderId::ADYEN,
            reference: Reference::parse(reference).unwrap(),
            account: AccountId::parse(account).unwrap(),
            money: Money::new(value, Currency::parse("EUR").unwrap()).unwrap(),
        })
        .await
        .unwrap();
}

async fn eur(store: &DynamoStore, account: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    (
        b.balances
            .get(&Currency::parse("EUR").unwrap())
            .copied()
            .unwrap_or(0),
        b.entries,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_applies_each_item_once_and_a_retry_only_what_is_missing() {
    // GIVEN two payments registered under their merchant references
    let store = store("adyen_batch").await;
    let app = app(store.clone());
    expect(&store, "order-1", "wallet_a", 10_000).await;
    expect(&store, "order-2", "wallet_a", 5_000).await;
    let pay1 = item(KEY, "AUTHORISATION", "PSP_A1", "order-1", None, 10_000);
    let pay2 = item(OLD_KEY, "AUTHORISATION", "PSP_A2", "order-2", None, 5_000);
    // A refund of order-2 that names it by its pspReference, in a batch before its payment.
    let refund2 = item(KEY, "REFUND", "PSP_R2", "order-2", Some("PSP_A2"), 2_000);
    // WHEN the first batch holds order-1's payment and order-2's refund (not payable yet)
    let first = send(&app, batch(&[pay1.clone(), refund2.clone()])).await;
    // THEN Adyen is told to retry (the refund is parked), and order-1 is credited
    assert_eq!(first.status, 500, "{}", first.body);
    assert_eq!(eur(&store, "wallet_a").await, (10_000, 1));
    // WHEN order-2's payment arrives, then Adyen retries the first batch
    let second = send(&app, batch(&[pay2])).await;
    assert_eq!((second.status, second.body.as_str()), (200, "[accepted]"));
    let retry = send(&app, batch(&[pay1, refund2])).await;
    // THEN the retry applies only the refund (the payment replays), and answers [accepted]
    assert_eq!((retry.status, retry.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_a").await, (10_000 + 5_000 - 2_000, 3));
}

#[tokio::test]
async fn a_forged_item_is_refused_alone_and_a_batch_of_forgeries_is_401() {
    let store = store("adyen_forged").await;
    let app = app(store.clone());
    expect(&store, "order-9", "wallet_f", 700).await;
    let good = item(KEY, "AUTHORISATION", "PSP_F1", "order-9", None, 700);
    let mut forged = item(KEY, "AUTHORISATION", "PSP_F2", "order-9", None, 700);
    // Someone holding a signed item changes the amount: the signature no longer matches.
    forged["amount"]["value"] = Value::from(70_000);
    forged["merchantReference"] = Value::from("order-10");
    let r = send(&app, batch(&[forged.clone(), good])).await;
    assert_eq!((r.status, r.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_f").await, (700, 1));
    let before = counts(&store).await;
    let wrong = item(WRONG_KEY, "AUTHORISATION", "PSP_F3", "order-9", None, 700);
    let r = send(&app, batch(&[forged, wrong])).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        counts(&store).await,
        before,
        "a refused batch writes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_redeliveries_of_a_batch_move_money_once() {
    let store = store("adyen_concurrent").await;
    let app = app(store.clone());
    expect(&store, "order-c", "wallet_c", 1_234).await;
    let items = [
        item(KEY, "AUTHORISATION", "PSP_C1", "order-c", None, 1_234),
        item(KEY, "CHARGEBACK", "PSP_CB1", "order-c", Some("PSP_C1"), 234),
    ];
    let tasks = (0..8).map(|_| {
        let (app, req) = (app.clone(), batch(&items));
        tokio::spawn(async move { send(&app, req).await.status })
    });
    let statuses: Vec<u16> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 500)),
        "{statuses:?}"
    );
    // Whatever was in flight is decided by a last redelivery.
    let last = send(&app, batch(&items)).await;
    assert_eq!((last.status, last.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_c").await, (1_000, 2));
}

#[tokio::test]
async fn without_a_registered_payment_or_basic_auth_a_credit_is_unassigned() {
    let store = store("adyen_unassigned").await;
    let app = app(store.clone());
    let mut it = item(KEY, "AUTHORISATION", "PSP_U1", "order-u", None, 900);
    // Metadata is not signed: without basic auth it never names the account.
    it["additionalData"]["metadata.account"] = Value::from("wallet_thief");
    let r = send(&app, batch(&[it])).await;
    assert_eq!((r.status, r.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_thief").await, (0, 0));
}

/// The configuration with basic auth on: the request as a whole is authenticated, so an item's
/// `metadata.account` may name the account.
fn authed_config() -> Config {
    Config::from_lookup(|n| match n {
        "PAYHOOK_ADYEN_SECRETS" => Some(format!("{KEY} {OLD_KEY}")),
        "PAYHOOK_ADYEN_BASIC_AUTH" => Some(BASIC.to_owned()),
        _ => None,
    })
    .unwrap()
}

/// The request an API Gateway v2 event describes.
fn request(event: &Value) -> Request<Body> {
    let mut req = Request::post(event["rawPath"].as_str().unwrap());
    for (k, v) in event["headers"].as_object().unwrap() {
        req = req.header(k.as_str(), v.as_str().unwrap());
    }
    req.body(Body::from(event["body"].as_str().unwrap().to_owned()))
        .unwrap()
}

fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

#[tokio::test]
async fn every_sample_applies_once_and_its_forged_twins_write_nothing() {
    // GIVEN the webhook function with basic auth and two HMAC keys, as a rotation leaves it
    let store = store("adyen_samples").await;
    let config = authed_config();
    let mut app = payhook::runtime::build_app(&config, store.clone());
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("events/adyen");
    let order = [
        "authorisation.json",
        "refund.json",
        "refund_failed.json",
        "chargeback.json",
        "chargeback_reversed.json",
        "second_chargeback.json",
        "authorisation_refused.json",
        "cancellation.json",
        "cancel_or_refund.json",
        "batch_authorisation_and_refund.json",
    ];
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let mut listed: Vec<String> = order.iter().map(|f| (*f).to_owned()).collect();
    listed.sort();
    assert_eq!(files, listed, "every sample in events/adyen is exercised");
    let forger = Adyen::new(WRONG_KEY, Some(BASIC), "account", false).unwrap();
    for round in 0..2 {
        for file in order {
            // WHEN each sample is re-signed as `payhook sign` does
            let event = resign_file(&dir.join(file), &config).unwrap();
            let body = event["body"].as_str().unwrap();
            // THEN its items signed with a key that is not ours, and the request with the
            // wrong basic auth, are refused and write nothing
            let mut forged = event.clone();
            forged["body"] = Value::String(
                String::from_utf8(forger.sign_body(body.as_bytes()).unwrap()).unwrap(),
            );
            let mut wrong_auth = event.clone();
            wrong_auth["headers"]["authorization"] = Value::from(basic("adyen-notifier:guess"));
            let mut no_auth = event.clone();
            no_auth["headers"]
                .as_object_mut()
                .unwrap()
                .remove("authorization");
            let before = counts(&store).await;
            for (what, twin) in [
                ("forged", forged),
                ("wrong auth", wrong_auth),
                ("no auth", no_auth),
            ] {
                let r = send(&app, request(&twin)).await;
                assert_eq!(r.status, 401, "{what} {file}: {}", r.body);
            }
            assert_eq!(counts(&store).await, before, "{file}: a refused twin wrote");
            // AND the sample itself is accepted, the second round as a redelivery
            let r = send(&app, request(&event)).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, "[accepted]"),
                "round {round} {file}"
            );
        }
        // THEN the balance is each movement once: +10,000 -2,500 +2,500 (refund failed)
        // -10,000 +10,000 (chargeback reversed) -10,000 (second chargeback) +4,000 -1,500; the
        // cancel-or-refund of the refused payment takes back nothing (payhook never credited
        // it); redelivering all moves nothing
        assert_eq!(eur(&store, "wallet_42").await, (2_500, 8), "round {round}");
    }
}

#[tokio::test]
async fn with_basic_auth_the_metadata_names_the_account_and_a_request_without_it_is_401() {
    let store = store("adyen_basic").await;
    let mut app = payhook::runtime::build_app(&authed_config(), store.clone());
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    let mut it = item(KEY, "AUTHORISATION", "PSP_B1", "order-b", None, 3_300);
    it["additionalData"]["metadata.account"] = Value::from("wallet_b");
    // Re-signed: the metadata is not among the signed fields, so the signature still holds.
    it["additionalData"]["hmacSignature"] = Value::from(
        Adyen::new(KEY, None, "account", false)
            .unwrap()
            .sign_item(&it),
    );
    let r = send(&app, batch(&[it.clone()])).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(eur(&store, "wallet_b").await, (0, 0));
    let mut req = batch(&[it]);
    req.headers_mut()
        .insert("authorization", basic(BASIC).parse().unwrap());
    let r = send(&app, req).await;
    assert_eq!((r.status, r.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_b").await, (3_300, 1));
}

/// Sends `items` as one batch `n` times at once, then once more after: every attempt is 200 or
/// 500 (retry), and the last is `[accepted]`.
async fn at_once(app: &Arc<App<DynamoStore>>, items: &[Value], n: usize) {
    let tasks = (0..n).map(|_| {
        let (app, req) = (app.clone(), batch(items));
        tokio::spawn(async move { send(&app, req).await.status })
    });
    for status in futures::future::join_all(tasks).await {
        let status = status.unwrap();
        assert!(matches!(status, 200 | 500), "{status}");
    }
    let last = send(app, batch(items)).await;
    assert_eq!(
        (last.status, last.body.as_str()),
        (200, "[accepted]"),
        "{}",
        last.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_or_refund_takes_back_only_what_payhook_credited_once() {
    // GIVEN one payment credited (automatic capture: its AUTHORISATION) and one registered
    // but never credited (its authorisation never reached payhook as a credit)
    let store = store("adyen_cancel_or_refund").await;
    let app = app(store.clone());
    expect(&store, "order-k1", "wallet_k", 10_000).await;
    expect(&store, "order-k2", "wallet_k", 4_000).await;
    let pay = item(KEY, "AUTHORISATION", "PSP_K1", "order-k1", None, 10_000);
    assert_eq!(send(&app, batch(&[pay])).await.status, 200);
    assert_eq!(eur(&store, "wallet_k").await, (10_000, 1));

    // WHEN Adyen reports CANCEL_OR_REFUND for both, ten deliveries of the batch at once
    let items = [
        item(
            KEY,
            "CANCEL_OR_REFUND",
            "PSP_X1",
            "order-k1",
            Some("PSP_K1"),
            10_000,
        ),
        item(
            KEY,
            "CANCEL_OR_REFUND",
            "PSP_X2",
            "order-k2",
            Some("PSP_K2"),
            4_000,
        ),
    ];
    at_once(&app, &items, 10).await;

    // THEN the credited payment is taken back once (one refund entry), the other moves nothing
    assert_eq!(eur(&store, "wallet_k").await, (0, 2));
    let refunded = store
        .payment(ProviderId::ADYEN, &Reference::parse("order-k1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (refunded.status.as_str(), refunded.refunded_minor),
        ("REFUNDED", 10_000)
    );
    let untouched = store
        .payment(ProviderId::ADYEN, &Reference::parse("order-k2").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (untouched.status.as_str(), untouched.refunded_minor),
        ("PENDING", 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_chargeback_after_a_reversal_debits_once() {
    // GIVEN a credited payment whose chargeback was reversed
    let store = store("adyen_second_chargeback").await;
    let app = app(store.clone());
    expect(&store, "order-s", "wallet_s", 5_000).await;
    for it in [
        item(KEY, "AUTHORISATION", "PSP_S1", "order-s", None, 5_000),
        item(
            KEY,
            "CHARGEBACK",
            "PSP_SCB",
            "order-s",
            Some("PSP_S1"),
            5_000,
        ),
        item(
            KEY,
            "CHARGEBACK_REVERSED",
            "PSP_SCB",
            "order-s",
            Some("PSP_S1"),
            5_000,
        ),
    ] {
        let r = send(&app, batch(&[it])).await;
        assert_eq!((r.status, r.body.as_str()), (200, "[accepted]"));
    }
    assert_eq!(eur(&store, "wallet_s").await, (5_000, 3));

    // WHEN the issuer declines the defence: SECOND_CHARGEBACK (same dispute pspReference),
    // ten deliveries at once
    let second = item(
        KEY,
        "SECOND_CHARGEBACK",
        "PSP_SCB",
        "order-s",
        Some("PSP_S1"),
        5_000,
    );
    at_once(&app, &[second], 10).await;

    // THEN the money is debited again, once
    assert_eq!(eur(&store, "wallet_s").await, (0, 4));
    let p = store
        .payment(ProviderId::ADYEN, &Reference::parse("order-s").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.disputed_minor, 5_000);
}

#[tokio::test]
async fn a_genuine_batch_never_forces_a_read_of_the_secrets() {
    // GIVEN an app whose secrets come from Secrets Manager (refreshed; every forced read counted)
    let store = store("adyen_reads").await;
    let config = Config::from_lookup(|n| match n {
        "PAYHOOK_ADYEN_SECRETS" => Some(KEY.to_owned()),
        _ => None,
    })
    .unwrap();
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut app = payhook::runtime::build_app(&config, store.clone());
    {
        let a = Arc::get_mut(&mut app).unwrap();
        a.metrics = payhook::metrics::MetricsSink::Off;
        let (providers, _) = config.providers();
        let refresh = common::CountingRefresh {
            config: config.clone(),
            reads: reads.clone(),
        };
        a.providers =
            payhook::http::live::LiveProviders::refreshed(providers, Box::new(refresh), i64::MAX);
    }
    expect(&store, "ord_reads", "w_reads", 1_000).await;

    // WHEN a genuine two-item batch is delivered
    let items = [
        item(KEY, "AUTHORISATION", "psp_reads", "ord_reads", None, 1_000),
        item(
            KEY,
            "REFUND",
            "psp_reads_r",
            "ord_reads",
            Some("psp_reads"),
            100,
        ),
    ];
    let answer = send(&app, batch(&items)).await;

    // THEN it is accepted and applied without a single read of the secrets
    assert_eq!((answer.status, answer.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "w_reads").await, (900, 2));
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 0);

    // WHEN a batch no known secret verifies arrives (what a rotation looks like)
    let forged = [item(WRONG_KEY, "AUTHORISATION", "psp_f", "ord_f", None, 5)];
    assert_eq!(send(&app, batch(&forged)).await.status, 401);

    // THEN that one forces a read (and only one)
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// #30 (M1 of its red team): a REFUND or CHARGEBACK that arrives before its AUTHORISATION names
/// the payment only by its pspReference, not yet bound to the merchantReference the payment is
/// keyed by. It waits on the transaction, and the AUTHORISATION that binds it takes it before
/// its credit: nothing of the credit is spendable before the money Adyen already took back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_before_its_authorisation_is_taken_by_the_credit_not_its_redelivery() {
    // GIVEN a registered payment of 10,000 whose refund (2,000) and chargeback (3,000) arrive
    // before its AUTHORISATION: both answered "retry" (500), nothing moved
    let store = store("adyen_debit_first").await;
    let app = app(store.clone());
    expect(&store, "order-f", "wallet_f", 10_000).await;
    let refund = item(KEY, "REFUND", "PSP_FR", "order-f", Some("PSP_F"), 2_000);
    let chargeback = item(KEY, "CHARGEBACK", "PSP_FC", "order-f", Some("PSP_F"), 3_000);
    for early in [&refund, &chargeback] {
        let r = send(&app, batch(std::slice::from_ref(early))).await;
        assert_eq!(r.status, 500, "{}", r.body);
    }
    assert_eq!(eur(&store, "wallet_f").await, (0, 0));
    let stub = store
        .payment(ProviderId::ADYEN, &Reference::parse("PSP_F").unwrap())
        .await
        .unwrap();
    assert!(
        stub.is_none(),
        "no payment keyed by the pspReference: {stub:?}"
    );

    // WHEN the AUTHORISATION arrives (and no redelivery of the debits yet)
    let pay = item(KEY, "AUTHORISATION", "PSP_F", "order-f", None, 10_000);
    let r = send(&app, batch(std::slice::from_ref(&pay))).await;
    assert_eq!((r.status, r.body.as_str()), (200, "[accepted]"));

    // THEN the debits left before the credit: 10,000 - 2,000 - 3,000, three entries
    assert_eq!(eur(&store, "wallet_f").await, (5_000, 3));

    // WHEN Adyen redelivers both debits and the AUTHORISATION
    let again = send(&app, batch(&[refund, chargeback, pay])).await;

    // THEN each is found done: nothing moves again
    assert_eq!((again.status, again.body.as_str()), (200, "[accepted]"));
    assert_eq!(eur(&store, "wallet_f").await, (5_000, 3));
    let p = store
        .payment(ProviderId::ADYEN, &Reference::parse("order-f").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((p.refunded_minor, p.disputed_minor), (2_000, 3_000));
}

/// A refund and its AUTHORISATION delivered at the same instant, many times over: whichever
/// write lands first, once both have answered the credit has taken the refund (it parked where
/// the credit reads, or it applied), so the balance is the payment less the refund every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_racing_its_authorisation_is_never_left_behind_the_credit() {
    let store = store("adyen_debit_race").await;
    let app = app(store.clone());
    let rounds = 12_i64;
    for i in 0..rounds {
        // GIVEN a registered payment of 5,000
        let (order, psp) = (format!("order-r{i}"), format!("PSP_RACE{i}"));
        expect(&store, &order, "wallet_r", 5_000).await;
        let refund = item(
            KEY,
            "REFUND",
            &format!("PSP_RR{i}"),
            &order,
            Some(&psp),
            2_000,
        );
        let pay = item(KEY, "AUTHORISATION", &psp, &order, None, 5_000);
        // WHEN its refund and its AUTHORISATION arrive at once
        let (r, p) = tokio::join!(
            send(&app, batch(std::slice::from_ref(&refund))),
            send(&app, batch(std::slice::from_ref(&pay)))
        );
        assert!(matches!(r.status, 200 | 500), "{}", r.body);
        let mut credited = p;
        while credited.status != 200 {
            // Only a contended write asks for a retry; the provider would redeliver.
            assert_eq!(credited.status, 500, "{}", credited.body);
            credited = send(&app, batch(std::slice::from_ref(&pay))).await;
        }
        // THEN the credit holds the refund already: no redelivery of the refund was needed
        assert_eq!(
            eur(&store, "wallet_r").await.0,
            3_000 * (i + 1),
            "round {i}: refund answered {}",
            r.status
        );
        // AND its redelivery moves nothing more
        let again = send(&app, batch(&[refund])).await;
        assert_eq!((again.status, again.body.as_str()), (200, "[accepted]"));
        assert_eq!(eur(&store, "wallet_r").await.0, 3_000 * (i + 1));
    }
}
