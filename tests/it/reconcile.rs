//! The reconciliation backstop converges: provider answers read by the same adapters as webhooks,
//! only final statuses end a payment, parked refunds and failed deliveries re-driven once, and a
//! pass finishes within its budget whatever the provider does. Against dynalite, with a fake
//! provider API on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::faults::{invoke, Fault, FaultInjector, Invocation};
use common::*;
use payhook::cli::client::sign_headers;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, Money, PaymentStatus, ProviderId, Reference};
use payhook::dynamodb::{DynamoStore, StoreClock};
use payhook::eventlog::{EventLog, LogFilter, Outcome};
use payhook::http::App;
use payhook::ledger::Ledger;
use payhook::payments::{ExpectedPayment, Payments};
use payhook::pipeline::Pipeline;
use payhook::providers::Providers;
use payhook::reconcile::{ApiEndpoint, HttpProviderApi, ReconcileSettings, Reconciler, Report};
use payhook::runtime::build_app;
use rand::{Rng, SeedableRng};
use serde_json::json;

const STRIPE: &str = "whsec_payhook_tests_stripe_endpoint_secret";
const PAYSTACK: &str = "sk_test_payhook_tests_paystack_secret_key";

/// What the fake answers for a payment key on its n-th call: status, body, delay.
type Behaviour = Arc<dyn Fn(&str, usize) -> (u16, String, u64) + Send + Sync>;

/// A fake provider API on loopback. Every path is answered by `behaviour`, keyed by the last
/// path segment (Stripe, Paystack, generic) or the `tx_ref` query (Flutterwave).
async fn fake_provider(behaviour: Behaviour) -> (String, Arc<Mutex<HashMap<String, usize>>>) {
    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let (b, c) = (behaviour, calls.clone());
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let (b, c) = (b.clone(), c.clone());
        async move {
            let key = uri
                .query()
                .and_then(|q| q.strip_prefix("tx_ref="))
                .map(str::to_owned)
                .unwrap_or_else(|| uri.path().rsplit('/').next().unwrap_or("").to_owned());
            let n = {
                let mut calls = c.lock().unwrap();
                let n = calls.entry(key.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let (status, body, delay_ms) = b(&key, n);
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            (axum::http::StatusCode::from_u16(status).unwrap(), body)
        }
    });
    (serve_fake(app).await, calls)
}

fn config() -> Config {
    Config::from_lookup(|name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
        "PAYHOOK_STRIPE_SECRETS" => Some(STRIPE.to_owned()),
        "PAYHOOK_PAYSTACK_SECRETS" => Some(PAYSTACK.to_owned()),
        "PAYHOOK_LEASE_MS" => Some("150".to_owned()),
        _ => None,
    })
    .unwrap()
}

fn app_of(store: &DynamoStore) -> Arc<App<DynamoStore>> {
    let mut app = build_app(&config(), store.clone());
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    app
}

fn api(base_url: &str, timeout_ms: u64) -> HttpProviderApi {
    let endpoints = [
        ProviderId::GENERIC,
        ProviderId::STRIPE,
        ProviderId::PAYSTACK,
    ]
    .into_iter()
    .map(|provider| ApiEndpoint {
        provider,
        base_url: base_url.to_owned(),
        api_key: "k_test".into(),
        basic_auth: false,
    })
    .collect();
    HttpProviderApi::new(endpoints)
        .unwrap()
        .with_timeout(Duration::from_millis(timeout_ms))
}

fn settings() -> ReconcileSettings {
    ReconcileSettings {
        pending_after_ms: 0,
        lease_ms: 5_000,
        call_timeout_ms: 300,
        budget_ms: 20_000,
        ..ReconcileSettings::default()
    }
}

async fn pass(
    store: &DynamoStore,
    providers: &Providers,
    api: &HttpProviderApi,
    settings: ReconcileSettings,
) -> Report {
    let pipeline = Pipeline::new(store.clone());
    Reconciler {
        pipeline: &pipeline,
        providers,
        api,
        settings,
    }
    .run()
    .await
    .unwrap()
}

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

async fn expect(store: &DynamoStore, provider: ProviderId, r: &str, acct: &str, amount: i64) {
    let e = ExpectedPayment {
        provider,
        reference: Reference::parse(r).unwrap(),
        account: AccountId::parse(acct).unwrap(),
        money: Money::new(amount, ngn()).unwrap(),
    };
    store.register(&e).await.unwrap();
}

async fn balance(store: &DynamoStore, acct: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (b.balances.get(&ngn()).copied().unwrap_or(0), b.entries)
}

async fn status(store: &DynamoStore, provider: ProviderId, r: &str) -> Option<PaymentStatus> {
    store
        .payment(provider, &Reference::parse(r).unwrap())
        .await
        .unwrap()
        .map(|p| p.status)
}

fn subjects(findings: &[payhook::reconcile::Finding], kind: &str) -> Vec<String> {
    let mut s: Vec<String> = findings
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| f.subject.clone())
        .collect();
    s.sort();
    s
}

fn ok(body: serde_json::Value) -> (u16, String, u64) {
    (200, body.to_string(), 0)
}

#[tokio::test]
async fn a_partial_capture_is_read_as_webhooks_read_it_and_never_over_credited() {
    // GIVEN a Stripe payment registered for 1000 whose intent captured only 800
    let store = store("rc_partial").await;
    expect(&store, ProviderId::STRIPE, "pi_partial", "w_pc", 1_000).await;
    let intent = json!({"id": "pi_partial", "object": "payment_intent", "status": "succeeded", "amount": 1000,
        "amount_received": 800, "currency": "ngn", "metadata": {"account": "w_pc"}});
    let (base, _) = fake_provider(Arc::new(move |_, _| ok(intent.clone()))).await;
    let (providers, _) = config().providers();

    // WHEN a pass asks Stripe about it
    let report = pass(&store, &providers, &api(&base, 1_000), settings()).await;

    // THEN nothing is credited: 800 received is not the 1000 registered, and a human is told why,
    // what Stripe said, and how to look
    assert_eq!(balance(&store, "w_pc").await, (0, 0));
    assert_eq!(
        status(&store, ProviderId::STRIPE, "pi_partial").await,
        Some(PaymentStatus::Pending)
    );
    let f = report
        .needs_human
        .iter()
        .find(|f| f.subject == "pi_partial")
        .expect("needs a human");
    assert_eq!(f.provider_answer.as_ref().unwrap()["amount"], 800, "{f:?}");
    assert!(
        f.reason.as_deref().unwrap_or("").contains("amount"),
        "{f:?}"
    );
    assert!(
        f.resolve
            .as_deref()
            .unwrap_or("")
            .starts_with("payhook payments show"),
        "{f:?}"
    );
}

fn paystack_verify(reference: &str, status: &str) -> serde_json::Value {
    json!({"status": true, "message": "Verification successful", "data": {"id": 1, "status": status,
        "reference": reference, "amount": 250000, "currency": "NGN", "metadata": {"account": "w_ab"}}})
}

#[tokio::test]
async fn an_abandoned_paystack_payment_is_not_failed_and_its_late_success_credits_once() {
    // GIVEN two registered Paystack payments the customer has not finished ("abandoned")
    let store = store("rc_abandoned").await;
    expect(&store, ProviderId::PAYSTACK, "T_ab", "w_ab", 250_000).await;
    expect(&store, ProviderId::PAYSTACK, "T_old", "w_ab", 250_000).await;
    let (base, calls) =
        fake_provider(Arc::new(|key, _| ok(paystack_verify(key, "abandoned")))).await;
    let (providers, _) = config().providers();
    let api = api(&base, 1_000);

    // WHEN passes run, the second with a give-up horizon both payments are past
    let first = pass(&store, &providers, &api, settings()).await;
    let second = pass(
        &store,
        &providers,
        &api,
        ReconcileSettings {
            give_up_after_ms: 0,
            ..settings()
        },
    )
    .await;
    let third = pass(
        &store,
        &providers,
        &api,
        ReconcileSettings {
            give_up_after_ms: 0,
            ..settings()
        },
    )
    .await;

    // THEN neither is FAILED; past the horizon they are reported abandoned and no longer asked
    assert_eq!(
        subjects(&first.still_unknown, "open_payment"),
        vec!["T_ab", "T_old"],
        "{first:?}"
    );
    assert_eq!(
        subjects(&second.abandoned, "open_payment"),
        vec!["T_ab", "T_old"],
        "{second:?}"
    );
    assert!(
        third.abandoned.is_empty() && third.still_unknown.is_empty(),
        "{third:?}"
    );
    // (each pass also reads the dispute lists, `disputes` and `dispute`: not payment questions)
    let asked: usize = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(key, _)| !key.starts_with("dispute"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(asked, 4, "asked twice each, then never again");
    assert_eq!(
        status(&store, ProviderId::PAYSTACK, "T_ab").await,
        Some(PaymentStatus::Pending)
    );

    // AND the customer finishes: the real charge.success credits once
    let cfg = config();
    let app = app_of(&store);
    let body = json!({"event": "charge.success", "data": {"id": 1, "status": "success", "reference": "T_ab",
        "amount": 250000, "currency": "NGN", "metadata": {"account": "w_ab"}}})
    .to_string();
    for _ in 0..2 {
        let mut req = axum::http::Request::post("/webhooks/paystack");
        for (k, v) in
            sign_headers(ProviderId::PAYSTACK, &cfg, body.as_bytes(), "m", now_s()).unwrap()
        {
            req = req.header(k, v);
        }
        let r = send(
            &app,
            req.body(axum::body::Body::from(body.clone())).unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(balance(&store, "w_ab").await, (250_000, 1));
    assert_eq!(
        status(&store, ProviderId::PAYSTACK, "T_ab").await,
        Some(PaymentStatus::Paid)
    );
}

#[tokio::test]
async fn a_parked_refund_is_applied_once_its_payment_is_paid_and_never_again() {
    // GIVEN a refund that arrived before its payment (parked) and was never redelivered, and one
    // whose payment is still not paid
    let store = store("rc_parked").await;
    let app = app_of(&store);
    let refund = |r: &str, p: &str| {
        event_body(
            &format!("e_{r}"),
            "refund.succeeded",
            json!({"reference": r, "payment_reference": p, "amount": 300, "currency": "NGN"}),
        )
    };
    for _ in 0..2 {
        assert_eq!(
            send(&app, signed(&refund("rf_1", "pay_pk"))).await.status,
            409
        );
    }
    assert_eq!(
        send(&app, signed(&refund("rf_2", "pay_later")))
            .await
            .status,
        409
    );
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_p", "pay_pk", "w_pk", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    let (providers, _) = config().providers();
    let api = api("http://127.0.0.1:9", 300);

    // WHEN two passes run
    let first = pass(&store, &providers, &api, settings()).await;
    let second = pass(&store, &providers, &api, settings()).await;

    // THEN the first applies the paid payment's refund once; the other waits; the second pass
    // changes nothing and writes no log row for it
    assert_eq!(
        subjects(&first.completed, "parked_refund"),
        vec!["generic:refund:rf_1"],
        "{first:?}"
    );
    assert_eq!(
        subjects(&first.waiting, "parked_refund"),
        vec!["generic:refund:rf_2"],
        "{first:?}"
    );
    assert!(
        subjects(&second.completed, "parked_refund").is_empty(),
        "{second:?}"
    );
    assert_eq!(
        subjects(&second.waiting, "parked_refund"),
        vec!["generic:refund:rf_2"],
        "{second:?}"
    );
    assert_eq!(balance(&store, "w_pk").await, (700, 2));
    let rows = store
        .query(
            &LogFilter {
                reference: Some(Reference::parse("pay_pk").unwrap()),
                ..LogFilter::default()
            },
            100,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        rows.deliveries
            .iter()
            .filter(|d| d.replay_of.is_some())
            .count(),
        1
    );
}

#[tokio::test]
async fn a_refund_parked_on_an_open_payment_does_not_keep_it_from_being_asked() {
    // GIVEN a payment registered ten minutes ago and still PENDING
    let store = store("rc_park_age").await;
    let earlier = DynamoStore::with_clock(
        aws_sdk_dynamodb::Client::from_conf(sdk_builder().build()),
        store.tables().clone(),
        payhook::dynamodb::StoreSettings::default(),
        StoreClock::with_local_skew_ms(-10 * 60_000),
    );
    expect(&earlier, ProviderId::GENERIC, "pay_age", "w_age", 1_000).await;

    // WHEN a refund of it arrives now, and is redelivered (parked both times)
    let app = app_of(&store);
    let refund = event_body(
        "e_rf_age",
        "refund.succeeded",
        json!({"reference": "rf_age", "payment_reference": "pay_age", "amount": 300, "currency": "NGN"}),
    );
    for _ in 0..2 {
        assert_eq!(send(&app, signed(&refund)).await.status, 409);
    }

    // THEN a pass that asks about payments open for five minutes still asks about it: the
    // parked debit did not make the payment look new
    let (base, calls) = fake_provider(Arc::new(|_, _| (404, String::new(), 0))).await;
    let (providers, _) = config().providers();
    let old_enough = ReconcileSettings {
        pending_after_ms: 5 * 60_000,
        ..settings()
    };
    pass(&store, &providers, &api(&base, 1_000), old_enough).await;
    assert_eq!(calls.lock().unwrap().get("pay_age").copied(), Some(1));
    assert_eq!(balance(&store, "w_age").await, (0, 0));
}

#[tokio::test]
async fn failed_deliveries_are_redriven_once_oldest_first_from_a_cursor() {
    // GIVEN three deliveries whose payment write failed (logged failed, claims stuck)
    let base = store("rc_failed").await;
    let faulty = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(faulty, 150);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_w", "warm", "w_warm", 1, "NGN"))
        )
        .await
        .status,
        200
    );
    for i in 0..3 {
        let body = payment_body(&format!("e_f{i}"), &format!("pay_f{i}"), "w_f", 100, "NGN");
        let r = invoke(
            Invocation::new(Some((1, Fault::ServerError))),
            send(&app, signed(&body)),
        )
        .await;
        assert_eq!(r.status, 503);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Past the 150 ms leases as the reconciling store judges them: its clock (learnt from
    // DynamoDB's whole-second `Date`) may read up to about a second behind the clock that wrote
    // them, more on two loaded cores.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (providers, _) = config().providers();
    let api = api("http://127.0.0.1:9", 300);

    // WHEN three passes run, each allowed two items
    let small = ReconcileSettings {
        max_items: 2,
        ..settings()
    };
    let reports = [
        pass(&base, &providers, &api, small).await,
        pass(&base, &providers, &api, small).await,
        pass(&base, &providers, &api, small).await,
    ];

    // THEN the oldest two are re-driven first, the third on the next pass, none twice
    let redriven: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            r.completed
                .iter()
                .filter(|f| f.kind == "failed_delivery")
                .map(|f| f.detail.clone())
                .collect()
        })
        .collect();
    assert_eq!(redriven[0].len(), 2, "{reports:?}");
    assert!(
        redriven[0].iter().any(|d| d.ends_with("e_f0"))
            && redriven[0].iter().any(|d| d.ends_with("e_f1")),
        "{redriven:?}"
    );
    assert_eq!(redriven[1].len(), 1, "{redriven:?}");
    assert!(redriven[1][0].ends_with("e_f2"), "{redriven:?}");
    assert!(redriven[2].is_empty(), "{redriven:?}");
    assert!(reports[0].deferred.contains(&"failed_deliveries"));
    assert_eq!(balance(&base, "w_f").await, (300, 3));
    let failed = base
        .query(
            &LogFilter {
                outcome: Some(Outcome::Failed),
                ..LogFilter::default()
            },
            100,
            None,
        )
        .await
        .unwrap();
    assert!(
        failed.deliveries.iter().all(|d| d.redriven.is_some()),
        "every failed delivery is marked"
    );
}

#[tokio::test]
async fn a_provider_that_hangs_on_one_payment_cannot_stall_the_pass() {
    // GIVEN six open payments; the provider hangs 30 s on one and answers the others
    let store = store("rc_slow").await;
    for i in 0..6 {
        expect(
            &store,
            ProviderId::GENERIC,
            &format!("slow_{i}"),
            "w_slow",
            500,
        )
        .await;
    }
    let (base, _) = fake_provider(Arc::new(|key, _| {
        let delay = if key == "slow_3" { 30_000 } else { 0 };
        (
            200,
            json!({"status": "succeeded", "amount": 500, "currency": "NGN", "account": "w_slow"})
                .to_string(),
            delay,
        )
    }))
    .await;
    let (providers, _) = config().providers();

    // WHEN a pass runs with a 300 ms call timeout and a 5 s budget
    let started = Instant::now();
    let report = pass(
        &store,
        &providers,
        &api(&base, 300),
        ReconcileSettings {
            budget_ms: 5_000,
            ..settings()
        },
    )
    .await;

    // THEN it ends long before the provider would have answered, the hung payment still
    // unknown, the rest applied
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the pass took {:?}",
        started.elapsed()
    );
    assert_eq!(
        subjects(&report.still_unknown, "open_payment"),
        vec!["slow_3"],
        "{report:?}"
    );
    assert_eq!(
        subjects(&report.completed, "open_payment").len(),
        5,
        "{report:?}"
    );
    assert_eq!(balance(&store, "w_slow").await, (2_500, 5));
}

/// The provider's final truth for one payment in the chaos run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Truth {
    Paid,
    Canceled,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciliation_converges_to_the_providers_truth_under_random_answers_and_webhooks() {
    // GIVEN 40 registered payments, each with a final truth the provider reaches after a random
    // number of calls; before that it answers processing, failed (an attempt), 500 or hangs
    let seed: u64 = std::env::var("PAYHOOK_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("reconcile chaos seed {seed} (PAYHOOK_TEST_SEED to repeat)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let store = store("rc_chaos").await;
    let mut truths = HashMap::new();
    for i in 0..40 {
        let r = format!("ch_{i}");
        expect(&store, ProviderId::GENERIC, &r, "w_ch", 1_000 + i).await;
        let truth = if rng.gen_bool(0.75) {
            Truth::Paid
        } else {
            Truth::Canceled
        };
        truths.insert(r, (truth, 1_000 + i, rng.gen_range(1..5usize)));
    }
    let answers = Arc::new(truths.clone());
    let noise = Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed)));
    let (base, _) = fake_provider(Arc::new(move |key, n| {
        let Some(&(truth, amount, settles_after)) = answers.get(key) else { return (404, "{}".into(), 0) };
        if n >= settles_after {
            return match truth {
                Truth::Paid => ok(json!({"status": "succeeded", "amount": amount, "currency": "NGN", "account": "w_ch"})),
                Truth::Canceled => ok(json!({"status": "canceled"})),
            };
        }
        match noise.lock().unwrap().gen_range(0..4) {
            0 => ok(json!({"status": "processing"})),
            1 => ok(json!({"status": "failed"})),
            2 => (500, "{}".into(), 0),
            _ => (200, "{}".into(), 2_000),
        }
    }))
    .await;
    let (providers, _) = config().providers();
    let api = api(&base, 200);
    let app = app_of(&store);

    // WHEN passes run while some paid payments' webhooks arrive at random moments
    let webhooks: Vec<String> = truths
        .iter()
        .filter(|(_, t)| t.0 == Truth::Paid)
        .map(|(r, _)| r.clone())
        .filter(|_| rng.gen_bool(0.5))
        .collect();
    let sender = {
        let (app, truths) = (app.clone(), truths.clone());
        let delays: Vec<u64> = webhooks.iter().map(|_| rng.gen_range(0..1_500)).collect();
        tokio::spawn(async move {
            let sends = webhooks.iter().zip(delays).map(|(r, delay)| {
                let (app, amount) = (app.clone(), truths[r].1);
                async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    for _ in 0..50 {
                        let resp = send(
                            &app,
                            signed(&payment_body(&format!("wh_{r}"), r, "w_ch", amount, "NGN")),
                        )
                        .await;
                        if resp.status == 200 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    panic!("webhook for {r} never settled");
                }
            });
            futures::future::join_all(sends).await;
        })
    };
    for _ in 0..8 {
        pass(
            &store,
            &providers,
            &api,
            ReconcileSettings {
                concurrency: 8,
                ..settings()
            },
        )
        .await;
    }
    sender.await.unwrap();
    pass(&store, &providers, &api, settings()).await;

    // THEN every payment is where the provider says, and each paid one was credited once
    let mut expected = (0, 0);
    for (r, (truth, amount, _)) in &truths {
        let want = match truth {
            Truth::Paid => PaymentStatus::Paid,
            Truth::Canceled => PaymentStatus::Failed,
        };
        assert_eq!(
            status(&store, ProviderId::GENERIC, r).await,
            Some(want),
            "seed {seed}: {r}"
        );
        if *truth == Truth::Paid {
            expected = (expected.0 + amount, expected.1 + 1);
        }
    }
    assert_eq!(balance(&store, "w_ch").await, expected, "seed {seed}");
}

/// A failed delivery of a generic payment as the log holds it: received at `received_at_ms`.
fn failed_delivery(
    event_id: &str,
    reference: &str,
    received_at_ms: i64,
) -> payhook::eventlog::Delivery {
    let reference = Reference::parse(reference).unwrap();
    payhook::eventlog::Delivery {
        id: payhook::eventlog::Delivery::new_id(received_at_ms),
        provider: ProviderId::GENERIC,
        event_id: event_id.into(),
        event_type: "payment.succeeded".into(),
        key: Some(payhook::domain::IdempotencyKey::new(
            ProviderId::GENERIC,
            payhook::domain::Operation::Payment,
            &reference,
        )),
        raw_body: Some(payment_body(
            event_id,
            reference.as_str(),
            "w_late",
            100,
            "NGN",
        )),
        reference: Some(reference),
        outcome: Outcome::Failed,
        http_status: 503,
        received_at_ms,
        replay_of: None,
        started_by: None,
        redriven: None,
        details: Default::default(),
    }
}

#[tokio::test]
async fn a_failure_logged_after_a_later_arrival_was_redriven_is_still_redriven_once() {
    // GIVEN delivery A arrives first but its failure is logged ~10 s later (a slow attempt),
    // while B, arriving 0.4 s after A, fails at once and is re-driven by a pass
    let store = store("rc_late").await;
    let (providers, _) = config().providers();
    let api = api("http://127.0.0.1:9", 300);
    let a_arrived = payhook::domain::now_ms() - 10_000;
    store
        .append(&failed_delivery("e_b", "pay_b", a_arrived + 400))
        .await
        .unwrap();
    let first = pass(&store, &providers, &api, settings()).await;

    // WHEN A's failure is logged only now, and two more passes run
    store
        .append(&failed_delivery("e_a", "pay_a", a_arrived))
        .await
        .unwrap();
    let second = pass(&store, &providers, &api, settings()).await;
    let third = pass(&store, &providers, &api, settings()).await;

    // THEN B is re-driven by the first pass and A by the second, each once
    let redriven = |r: &Report| -> Vec<String> {
        r.completed
            .iter()
            .filter(|f| f.kind == "failed_delivery")
            .map(|f| f.detail.clone())
            .collect()
    };
    assert_eq!(
        redriven(&first),
        vec!["applied: e_b".to_owned()],
        "{first:?}"
    );
    assert_eq!(
        redriven(&second),
        vec!["applied: e_a".to_owned()],
        "{second:?}"
    );
    assert!(redriven(&third).is_empty(), "{third:?}");
    assert_eq!(balance(&store, "w_late").await, (200, 2));
}

#[tokio::test]
async fn razorpay_is_asked_with_basic_auth_and_its_captured_payment_credits_once() {
    // GIVEN a Razorpay payment registered, and a payments API that answers only with basic auth
    let store = store("rc_razorpay").await;
    let e = ExpectedPayment {
        provider: ProviderId::RAZORPAY,
        reference: Reference::parse("pay_rzp_1").unwrap(),
        account: AccountId::parse("w_rzp").unwrap(),
        money: Money::new(50_000, Currency::parse("INR").unwrap()).unwrap(),
    };
    store.register(&e).await.unwrap();
    let want = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "rzp_key_id:rzp_key_secret"
        )
    );
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let app = axum::Router::new().route(
        "/v1/payments/{id}",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let (seen, want) = (seen.clone(), want.clone());
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                seen.lock().unwrap().push(auth.clone());
                if auth != want {
                    return (axum::http::StatusCode::UNAUTHORIZED, "{}".to_owned());
                }
                let entity = json!({"id": "pay_rzp_1", "entity": "payment", "amount": 50000,
                    "currency": "INR", "status": "captured", "notes": {"account": "w_rzp"}});
                (axum::http::StatusCode::OK, entity.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = Config::from_lookup(|n| match n {
        "PAYHOOK_RAZORPAY_SECRETS" => Some("rzp_webhook_secret".into()),
        "PAYHOOK_RAZORPAY_API_URL" => Some(base.clone()),
        "PAYHOOK_RAZORPAY_API_KEY" => Some("rzp_key_id:rzp_key_secret".into()),
        _ => None,
    })
    .unwrap();
    let (providers, _) = config.providers();
    let api = HttpProviderApi::new(config.api_endpoints.clone())
        .unwrap()
        .with_timeout(Duration::from_millis(1_000));
    // WHEN two passes ask about it
    pass(&store, &providers, &api, settings()).await;
    pass(&store, &providers, &api, settings()).await;
    // THEN it was asked with basic auth, and credited once
    assert!(asked
        .lock()
        .unwrap()
        .iter()
        .all(|a| a.starts_with("Basic ")));
    let b = store
        .balance(&AccountId::parse("w_rzp").unwrap())
        .await
        .unwrap();
    assert_eq!(
        (
            b.balances.get(&Currency::parse("INR").unwrap()).copied(),
            b.entries
        ),
        (Some(50_000), 1)
    );
}

#[tokio::test]
async fn a_credit_claim_the_previous_release_left_in_the_claims_table_is_finished_there_once() {
    use payhook::idempotency::{ClaimOutcome, ClaimState, Claims};
    // GIVEN a credit claimed in the claims table by the previous release (before #32 moved a
    // credit's claim onto its payment), whose invocation died before paying
    let store = store("rc_legacy").await;
    let key = payhook::domain::IdempotencyKey::from_stored("generic:payment:pay_old".into());
    let kind = payhook::domain::EventKind::PaymentSucceeded(payhook::domain::PaymentFacts {
        reference: Reference::parse("pay_old").unwrap(),
        account: Some(AccountId::parse("w_old").unwrap()),
        money: Money::new(450, ngn()).unwrap(),
    });
    let fp = payhook::domain::ClaimedFacts::of(&kind)
        .unwrap()
        .fingerprint();
    let held = store.claim(&key, &fp, 1).await.unwrap();
    assert!(matches!(held, ClaimOutcome::Claimed { .. }));
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // WHEN a reconciliation pass runs, and then the provider redelivers the payment
    let (providers, _) = config().providers();
    let report = pass(
        &store,
        &providers,
        &api("http://127.0.0.1:9", 300),
        settings(),
    )
    .await;
    let app = app(store.clone(), 30_000);
    let again = send(
        &app,
        signed(&payment_body("e_old", "pay_old", "w_old", 450, "NGN")),
    )
    .await;

    // THEN the claims table's claim is finished there (DONE), the payment carries no claim of
    // its own, the money moved once, and the redelivery is answered from the claims table
    let resumed: Vec<_> = report
        .completed
        .iter()
        .filter(|f| f.kind == "stuck_claim")
        .collect();
    assert_eq!(resumed.len(), 1, "{report:?}");
    let claim = store.get_claim(&key).await.unwrap().unwrap();
    assert!(matches!(claim.state, ClaimState::Done(_)), "{claim:?}");
    let paid = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_old").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paid.claim, None);
    assert_eq!(balance(&store, "w_old").await, (450, 1));
    assert_eq!(
        (again.status, again.replayed),
        (200, true),
        "{}",
        again.body
    );
}
