//! Money stays right when configuration changes, replies get lost and providers behave like
//! providers: one test per rule, each against dynalite through the real router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use axum::body::Body;
use axum::http::Request;
use common::faults::{invoke, Fault, FaultInjector, Invocation};
use common::*;
use payhook::cli::client::sign_headers;
use payhook::config::Config;
use payhook::domain::{
    AccountId, Currency, IdempotencyKey, Money, Operation, PaymentStatus, ProviderId, Reference,
};
use payhook::dynamodb::DynamoStore;
use payhook::eventlog::{EventLog, LogFilter, Outcome};
use payhook::http::App;
use payhook::ledger::{Layout, Ledger};
use payhook::payments::{ExpectedPayment, Payments};
use payhook::pipeline::Pipeline;
use payhook::replay::{replay, ReplayOptions};
use payhook::runtime::build_app;
use serde_json::json;

const LEASE_MS: i64 = 150;
const FW_V3: &str = "payhook-tests-flutterwave-v3-hash";
const PAYSTACK: &str = "sk_test_payhook_tests_paystack_secret_key";
const STRIPE: &str = "whsec_payhook_tests_stripe_endpoint_secret";

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

/// A configuration from pairs, on top of the generic test secret and a short lease.
fn config_with(pairs: &[(&'static str, &str)]) -> Config {
    let pairs: Vec<(&'static str, String)> =
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    Config::from_lookup(move |name| match pairs.iter().find(|(k, _)| *k == name) {
        Some((_, v)) => Some(v.clone()),
        None => match name {
            "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
            "PAYHOOK_LEASE_MS" => Some(LEASE_MS.to_string()),
            "PAYHOOK_FLUTTERWAVE_SECRETS" => Some(FW_V3.to_owned()),
            "PAYHOOK_PAYSTACK_SECRETS" => Some(PAYSTACK.to_owned()),
            "PAYHOOK_STRIPE_SECRETS" => Some(STRIPE.to_owned()),
            _ => None,
        },
    })
    .unwrap()
}

fn app_with(store: DynamoStore, config: &Config) -> Arc<App<DynamoStore>> {
    let mut app = build_app(config, store);
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    app
}

/// A provider delivery signed the provider's way with `config`'s secrets.
fn provider_request(provider: ProviderId, config: &Config, body: &str) -> Request<Body> {
    let mut req =
        Request::post(format!("/webhooks/{provider}")).header("content-type", "application/json");
    for (k, v) in sign_headers(provider, config, body.as_bytes(), "msg_money", now_s()).unwrap() {
        req = req.header(k, v);
    }
    req.body(Body::from(body.to_owned())).unwrap()
}

async fn balance(store: &DynamoStore, acct: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (b.balances.get(&ngn()).copied().unwrap_or(0), b.entries)
}

/// Delivers like a provider: retries 409 and 5xx until a final answer.
async fn settle(app: &Arc<App<DynamoStore>>, req: impl Fn() -> Request<Body>) -> Resp {
    for _ in 0..100 {
        let r = send(app, req()).await;
        if r.status != 409 && r.status < 500 {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    panic!("never settled")
}

/// Deletes a claim, as its TTL would once the retention passed.
/// Forgets `key`'s claim: a claims-table claim as its TTL would; a credit's claim held on its
/// payment (#32, kept for good) by removing it, as a payment paid by the previous release has
/// none. Either way the next attempt must find every step done by what the items record.
async fn expire_claim(store: &DynamoStore, key: &str) {
    let table = store.tables().idempotency.clone();
    store
        .client()
        .delete_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.into()))
        .send()
        .await
        .unwrap();
    let mut parts = key.splitn(3, ':');
    if let (Some(provider), Some("payment"), Some(reference)) =
        (parts.next(), parts.next(), parts.next())
    {
        store
            .client()
            .update_item()
            .table_name(store.tables().payments.clone())
            .key("pk", AttributeValue::S(format!("{provider}#{reference}")))
            .update_expression(
                "REMOVE claim_state, claim_owner, claim_lease_ms, claim_fp, answer_status, \
                 answer_body",
            )
            .condition_expression("attribute_exists(pk)")
            .send()
            .await
            .unwrap();
    }
}

async fn outcomes(store: &DynamoStore, reference: &str) -> Vec<Outcome> {
    let filter = LogFilter {
        reference: Some(Reference::parse(reference).unwrap()),
        ..LogFilter::default()
    };
    let mut page = store.query(&filter, 100, None).await.unwrap().deliveries;
    page.reverse();
    page.into_iter().map(|d| d.outcome).collect()
}

/// Shards of the ledger entries of `acct`, read straight from the table.
async fn entry_shards(store: &DynamoStore, acct: &str) -> Vec<String> {
    let mut shards: Vec<String> = scan(store, &store.tables().ledger.clone())
        .await
        .iter()
        .filter(|i| {
            i.get("account")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some(acct)
        })
        .map(|i| {
            i["pk"]
                .as_s()
                .unwrap()
                .rsplit_once('#')
                .unwrap()
                .1
                .to_owned()
        })
        .collect();
    shards.sort();
    shards
}

fn replay_opts() -> ReplayOptions {
    ReplayOptions {
        dry_run: false,
        concurrency: 2,
        started_by: "test".into(),
        lease_ms: 30_000,
        include_replays: false,
        max: 100,
    }
}

fn generic_key(op: Operation, r: &str) -> IdempotencyKey {
    IdempotencyKey::new(ProviderId::GENERIC, op, &Reference::parse(r).unwrap())
}

/// A reference whose placement differs between a 4- and an 8-shard layout, with `want(shard8)`.
fn reference_moved_by_growth(prefix: &str, want: impl Fn(u32) -> bool) -> String {
    (0..1_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|r| {
            let k = generic_key(Operation::Payment, r);
            let (four, eight) = (
                Layout::with_ledger_shards(4).place(&k),
                Layout::with_ledger_shards(8).place(&k),
            );
            four != eight && want(eight)
        })
        .unwrap()
}

#[tokio::test]
async fn growing_the_ledger_layout_never_moves_an_entry_a_retry_takeover_or_replay_looks_for() {
    // GIVEN a payment whose invocation dies right after the payment step, under the default
    // layout (4 shards), for a reference that an 8-shard layout would place elsewhere
    let base = store("layout").await;
    let faulty = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app4 = app(faulty.clone(), LEASE_MS);
    let warm = send(
        &app4,
        signed(&payment_body("e_w", "warm", "w_other", 1, "NGN")),
    )
    .await;
    assert_eq!(warm.status, 200, "warm-up loads the layout: {}", warm.body);
    let r = reference_moved_by_growth("lay", |_| true);
    let key = generic_key(Operation::Payment, &r);
    let body = payment_body(&format!("e_{r}"), &r, "w_lay", 700, "NGN");
    // After the warm-up, calls are (#32): payment with its credit's claim 0, ledger 1,
    // the claim DONE 2, log 3.
    let inv = Invocation::new(Some((0, Fault::CrashAfter)));
    let first = invoke(inv.clone(), send(&app4, signed(&body))).await;
    assert!(
        inv.fired() && first.status == 503,
        "{} {}",
        first.status,
        first.body
    );

    // WHEN the layout grows to 8 and a new deployment (its own pipeline) takes the retry over
    assert_eq!(
        base.grow_layout(Layout::with_ledger_shards(8))
            .await
            .unwrap(),
        Layout::with_ledger_shards(8)
    );
    let shrink = Layout {
        ledger_shards: 2,
        index_shards: 1,
    };
    assert_eq!(
        base.grow_layout(shrink).await.unwrap(),
        Layout::with_ledger_shards(8),
        "layouts never shrink"
    );
    let app8 = app(base.clone(), LEASE_MS);
    let retried = settle(&app8, || signed(&body)).await;

    // THEN the entry is where the payment step recorded it, once
    assert_eq!(
        (retried.status, retried.json()["status"].clone()),
        (200, json!("applied")),
        "{}",
        retried.body
    );
    let paid = base
        .payment(ProviderId::GENERIC, &Reference::parse(&r).unwrap())
        .await
        .unwrap()
        .unwrap();
    let recorded = paid.ledger_shard.unwrap();
    assert_eq!(recorded, Layout::with_ledger_shards(4).place(&key));
    assert_eq!(
        entry_shards(&base, "w_lay").await,
        vec![recorded.to_string()]
    );
    assert_eq!(balance(&base, "w_lay").await, (700, 1));

    // WHEN the claim has expired and the provider redelivers, and an operator replays it
    expire_claim(&base, key.as_str()).await;
    let again = send(&app8, signed(&body)).await;
    let again_logged = outcomes(&base, &r).await.last().copied();
    expire_claim(&base, key.as_str()).await;
    let filter = LogFilter {
        reference: Some(Reference::parse(&r).unwrap()),
        ..LogFilter::default()
    };
    let (providers, _) = config(30_000).providers();
    let one_by_one = ReplayOptions {
        concurrency: 1,
        ..replay_opts()
    };
    let summary = replay(
        &Pipeline::new(base.clone()),
        &providers,
        &filter,
        &one_by_one,
        |_, _| {},
    )
    .await
    .unwrap();

    // THEN nothing moves again, and both say so (the replay's first delivery finds every step
    // done; the others have its key, and a run drives a key once)
    assert_eq!(
        (again.status, again.json()["status"].clone()),
        (200, json!("applied")),
        "{}",
        again.body
    );
    assert_eq!(
        summary.results.get("already_applied"),
        Some(&1),
        "{summary:?}"
    );
    assert_eq!(
        (summary.selected, summary.results.get("replayed")),
        (1, None),
        "{summary:?}"
    );
    assert!(summary.same_key > 0, "{summary:?}");
    assert_eq!(balance(&base, "w_lay").await, (700, 1));
    assert_eq!(again_logged, Some(Outcome::AlreadyApplied));

    // AND a refund of it lands beside its credit, whatever the layout says now
    let refund = event_body(
        &format!("e_rf_{r}"),
        "refund.succeeded",
        json!({"reference": format!("rf_{r}"), "payment_reference": r, "amount": 200, "currency": "NGN"}),
    );
    assert_eq!(send(&app8, signed(&refund)).await.status, 200);
    assert_eq!(
        entry_shards(&base, "w_lay").await,
        vec![recorded.to_string(), recorded.to_string()]
    );
    assert_eq!(balance(&base, "w_lay").await, (500, 2));

    // AND a new payment placed in a shard only the grown layout has is read back by a fresh
    // reader (as `payhook balance` is), which reads the layout from the table
    let high = reference_moved_by_growth("hi", |s| s >= 4);
    assert_eq!(
        send(
            &app8,
            signed(&payment_body("e_hi", &high, "w_lay", 40, "NGN"))
        )
        .await
        .status,
        200
    );
    let reader = store_with(&base, sdk_builder());
    assert_eq!(balance(&reader, "w_lay").await, (540, 3));
}

fn flutterwave_charge(tx_ref: &str, id: u64, account: &str, amount: &str, status: &str) -> String {
    format!(
        r#"{{"event":"charge.completed","data":{{"id":{id},"tx_ref":"{tx_ref}","flw_ref":"FLW-{id}","amount":{amount},"currency":"NGN","status":"{status}"}},"meta_data":{{"account":"{account}"}}}}"#
    )
}

#[tokio::test]
async fn switching_the_flutterwave_reference_field_never_credits_a_payment_again() {
    // GIVEN one charge credited while payments were keyed by tx_ref, one while keyed by id
    let store = store("fwref").await;
    let by_tx_ref = config_with(&[("PAYHOOK_FLUTTERWAVE_REFERENCE", "tx_ref")]);
    let by_id = config_with(&[("PAYHOOK_FLUTTERWAVE_REFERENCE", "id")]);
    let (a, b) = (
        flutterwave_charge("order-a", 9001, "w_fw", "100.50", "successful"),
        flutterwave_charge("order-b", 9002, "w_fw", "20", "successful"),
    );
    let tx_app = app_with(store.clone(), &by_tx_ref);
    let id_app = app_with(store.clone(), &by_id);
    assert_eq!(
        send(
            &tx_app,
            provider_request(ProviderId::FLUTTERWAVE, &by_tx_ref, &a)
        )
        .await
        .json()["key"],
        "flutterwave:payment:order-a"
    );
    assert_eq!(
        send(
            &id_app,
            provider_request(ProviderId::FLUTTERWAVE, &by_id, &b)
        )
        .await
        .json()["key"],
        "flutterwave:payment:9002"
    );
    assert_eq!(balance(&store, "w_fw").await, (10_050 + 2_000, 2));

    // WHEN each is redelivered under the other setting, and again after its claim expired
    for (app, cfg, body, key) in [
        (&id_app, &by_id, &a, "flutterwave:payment:order-a"),
        (&tx_app, &by_tx_ref, &b, "flutterwave:payment:9002"),
    ] {
        let again = send(app, provider_request(ProviderId::FLUTTERWAVE, cfg, body)).await;
        assert!(
            again.replayed && again.json()["key"] == key,
            "{}",
            again.body
        );
        expire_claim(&store, key).await;
        let late = send(app, provider_request(ProviderId::FLUTTERWAVE, cfg, body)).await;
        assert_eq!(
            (late.status, late.json()["key"].clone()),
            (200, json!(key)),
            "{}",
            late.body
        );
    }

    // THEN each payment was credited once, under the reference it was first seen with
    assert_eq!(balance(&store, "w_fw").await, (12_050, 2));
    assert_eq!(
        outcomes(&store, "order-a").await,
        vec![Outcome::Applied, Outcome::Replayed, Outcome::AlreadyApplied]
    );

    // AND a v3 refund naming the charge by its transaction id debits that payment, priced in its
    // currency (the refund payload has none), once
    let refund = r#"{"event":"refund.completed","data":{"id":7001,"AmountRefunded":50.25,"status":"completed","TransactionId":9001}}"#;
    for _ in 0..2 {
        let r = send(
            &id_app,
            provider_request(ProviderId::FLUTTERWAVE, &by_id, refund),
        )
        .await;
        assert_eq!(
            (r.status, r.json()["payment_reference"].clone()),
            (200, json!("order-a")),
            "{}",
            r.body
        );
    }
    assert_eq!(balance(&store, "w_fw").await, (12_050 - 5_025, 3));
}

#[tokio::test]
async fn a_success_after_a_failure_credits_once_and_nothing_moves_a_paid_payment_back() {
    // GIVEN a payment the provider reported failed (a declined first try of a checkout)
    let store = store("recover").await;
    let app = app(store.clone(), 30_000);
    let failed = event_body(
        "e_f",
        "payment.failed",
        json!({"reference": "pay_r", "amount": 900, "currency": "NGN"}),
    );
    assert_eq!(
        send(&app, signed(&failed)).await.json()["payment_status"],
        "FAILED"
    );

    // WHEN its success arrives (twice), then the failure again
    let ok = payment_body("e_ok", "pay_r", "w_rec", 900, "NGN");
    let first = send(&app, signed(&ok)).await;
    let dup = send(&app, signed(&ok)).await;
    let late = send(&app, signed(&failed)).await;

    // THEN it is credited once, stays PAID, and its history says it recovered
    assert_eq!(
        (first.status, first.json()["status"].clone()),
        (200, json!("applied")),
        "{}",
        first.body
    );
    assert!(dup.replayed);
    assert_eq!(late.json()["status"], "stale");
    assert_eq!(balance(&store, "w_rec").await, (900, 1));
    let p = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_r").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.status, PaymentStatus::Paid);
    let statuses: Vec<_> = p.history.iter().map(|h| h.status).collect();
    assert_eq!(statuses, vec![PaymentStatus::Failed, PaymentStatus::Paid]);
    assert!(
        p.history[1].note.starts_with("recovered from FAILED"),
        "{:?}",
        p.history
    );
}

fn paystack_charge(reference: &str, metadata: &str) -> String {
    format!(
        r#"{{"event":"charge.success","data":{{"id":4099260516,"status":"success","reference":"{reference}","amount":500000,"currency":"NGN","metadata":{metadata}}}}}"#
    )
}

#[tokio::test]
async fn paystack_metadata_sent_as_a_json_string_credits_its_account() {
    let store = store("psmeta").await;
    let cfg = config_with(&[]);
    let app = app_with(store.clone(), &cfg);
    let body = paystack_charge("T_str", r#""{\"account\":\"w_ps\",\"cart_id\":398}""#);
    let r = send(&app, provider_request(ProviderId::PAYSTACK, &cfg, &body)).await;
    assert_eq!(
        (r.status, r.json()["account"].clone()),
        (200, json!("w_ps")),
        "{}",
        r.body
    );
    assert_eq!(balance(&store, "w_ps").await, (500_000, 1));
}

fn stripe_intent(id: &str, metadata: &str) -> String {
    format!(
        r#"{{"id":"evt_{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"{id}","object":"payment_intent","amount":4999,"amount_received":4999,"currency":"ngn","status":"succeeded","metadata":{metadata}}}}}}}"#
    )
}

#[tokio::test]
async fn a_payment_naming_no_account_is_acknowledged_unassigned_and_applies_later() {
    // GIVEN payments that name no account: a Stripe Checkout intent and Paystack `metadata: 0`
    let store = store("unassigned").await;
    let cfg = config_with(&[]);
    let app = app_with(store.clone(), &cfg);
    let stripe = stripe_intent("pi_nometa", "{}");
    let paystack = paystack_charge("T_none", "0");

    // WHEN they arrive (and are redelivered)
    let mut answers = Vec::new();
    for _ in 0..2 {
        answers.push(send(&app, provider_request(ProviderId::STRIPE, &cfg, &stripe)).await);
        answers.push(
            send(
                &app,
                provider_request(ProviderId::PAYSTACK, &cfg, &paystack),
            )
            .await,
        );
    }

    // THEN each is acknowledged (2xx: the provider stops retrying), nothing moves, and the log
    // lists them under their own outcome
    for a in &answers {
        assert_eq!(
            (a.status, a.json()["status"].clone()),
            (200, json!("unassigned")),
            "{}",
            a.body
        );
    }
    assert_eq!(counts(&store).await[2], 0, "no ledger entry");
    let listed = store
        .query(
            &LogFilter {
                outcome: Some(Outcome::Unassigned),
                ..LogFilter::default()
            },
            100,
            None,
        )
        .await
        .unwrap();
    assert_eq!(listed.deliveries.len(), 4);

    // WHEN the Stripe payment gets a mapping (registered with its account) and the unassigned
    // deliveries are replayed, twice
    let expected = ExpectedPayment {
        provider: ProviderId::STRIPE,
        reference: Reference::parse("pi_nometa").unwrap(),
        account: AccountId::parse("w_mapped").unwrap(),
        money: Money::new(4_999, ngn()).unwrap(),
    };
    store.register(&expected).await.unwrap();
    let filter = LogFilter {
        outcome: Some(Outcome::Unassigned),
        ..LogFilter::default()
    };
    let pipeline = Pipeline::new(store.clone());
    let (providers, _) = cfg.providers();
    let first = replay(&pipeline, &providers, &filter, &replay_opts(), |_, _| {})
        .await
        .unwrap();
    let second = replay(&pipeline, &providers, &filter, &replay_opts(), |_, _| {})
        .await
        .unwrap();

    // THEN the mapped one is credited once (its two deliveries: applied, then a replay), the
    // other stays unassigned until it has an account
    assert_eq!(balance(&store, "w_mapped").await, (4_999, 1));
    assert_eq!(first.results.get("applied"), Some(&1), "{first:?}");
    assert_eq!(first.results.get("unassigned"), Some(&1), "{first:?}");
    // Each payment's second delivery has its first one's key: driven once per run.
    assert_eq!(first.same_key, 2, "{first:?}");
    assert_eq!(second.results.get("applied"), None, "{second:?}");

    // AND with a default account configured, the Paystack one applies there on its next replay
    let with_default = Pipeline::new(store.clone())
        .with_default_account(Some(AccountId::parse("w_default").unwrap()));
    replay(
        &with_default,
        &providers,
        &filter,
        &replay_opts(),
        |_, _| {},
    )
    .await
    .unwrap();
    assert_eq!(balance(&store, "w_default").await.0, 500_000);
    assert_eq!(balance(&store, "w_mapped").await, (4_999, 1));
}

#[tokio::test]
async fn a_refund_that_fails_after_it_succeeded_is_credited_back_once() {
    // GIVEN a paid payment and an applied refund of part of it
    let store = store("reversal").await;
    let app = app(store.clone(), 30_000);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_p", "pay_v", "w_rev", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    let data = json!({"reference": "rf_v", "payment_reference": "pay_v", "amount": 400, "currency": "NGN"});
    assert_eq!(
        send(
            &app,
            signed(&event_body("e_rf", "refund.succeeded", data.clone()))
        )
        .await
        .status,
        200
    );
    assert_eq!(balance(&store, "w_rev").await, (600, 2));

    // WHEN the provider reports the refund failed, three times
    let failed = event_body("e_rf_fail", "refund.failed", data.clone());
    let answers = [
        send(&app, signed(&failed)).await,
        send(&app, signed(&failed)).await,
        send(&app, signed(&failed)).await,
    ];

    // THEN its debit is credited back once and the payment is whole again
    assert_eq!(
        answers[0].json()["status"],
        "applied",
        "{}",
        answers[0].body
    );
    assert!(answers[1].replayed && answers[2].replayed);
    assert_eq!(balance(&store, "w_rev").await, (1_000, 3));
    let p = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_v").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Paid, 0));

    // AND the refund's own success, redelivered after its claim expired, does not debit again
    expire_claim(&store, "generic:refund:rf_v").await;
    let late = send(&app, signed(&event_body("e_rf", "refund.succeeded", data))).await;
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(balance(&store, "w_rev").await, (1_000, 3));

    // AND a refund reported failed before its success ever arrived is void: the late success
    // moves nothing
    let early = json!({"reference": "rf_early", "payment_reference": "pay_v", "amount": 300, "currency": "NGN"});
    let void = send(
        &app,
        signed(&event_body("e_e1", "refund.failed", early.clone())),
    )
    .await;
    assert_eq!(void.json()["status"], "voided", "{}", void.body);
    let success = send(&app, signed(&event_body("e_e2", "refund.succeeded", early))).await;
    assert_eq!(
        (success.status, success.json()["status"].clone()),
        (200, json!("stale")),
        "{}",
        success.body
    );
    assert_eq!(balance(&store, "w_rev").await, (1_000, 3));
}

#[tokio::test]
async fn thirty_two_racing_refunds_all_apply_and_none_is_refused() {
    // GIVEN a paid payment of 32
    let store = store("refundrace").await;
    let app = app(store.clone(), 30_000);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_p", "pay_race", "w_race", 32, "NGN"))
        )
        .await
        .status,
        200
    );

    // WHEN 32 distinct refunds of 1 arrive at once, each delivered until it gets a final answer
    let answers = futures::future::join_all((0..32).map(|i| {
        let app = app.clone();
        async move {
            let body = event_body(&format!("e_rf{i}"), "refund.succeeded", json!({"reference": format!("rf_race_{i}"), "payment_reference": "pay_race", "amount": 1, "currency": "NGN"}));
            settle(&app, || signed(&body)).await
        }
    }))
    .await;

    // THEN every one applied (a lost race is never a final 422), and the payment is refunded
    for a in &answers {
        assert_eq!(
            (a.status, a.json()["status"].clone()),
            (200, json!("applied")),
            "{}",
            a.body
        );
    }
    assert_eq!(balance(&store, "w_race").await, (0, 33));
    let p = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_race").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 32));
}

#[tokio::test]
async fn amounts_are_bounded_and_references_may_hold_a_hash() {
    let store = store("bounds").await;
    let app = app(store.clone(), 30_000);
    let max = payhook::domain::MAX_AMOUNT_MINOR;
    let above = send(
        &app,
        signed(&payment_body("e_big", "big", "w_b", max + 1, "NGN")),
    )
    .await;
    assert_eq!(
        (above.status, above.json()["field"].clone()),
        (400, json!("data.amount")),
        "{}",
        above.body
    );
    assert_eq!(
        counts(&store).await,
        [0, 0, 0, 0],
        "a refused amount writes nothing"
    );
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_max", "order#17", "w_b", max, "NGN"))
        )
        .await
        .status,
        200
    );
    assert!(
        send(
            &app,
            signed(&payment_body("e_max2", "order#17", "w_b", max, "NGN"))
        )
        .await
        .replayed
    );
    assert_eq!(balance(&store, "w_b").await, (max, 1));
}

#[tokio::test]
async fn a_write_the_sdk_retries_after_a_lost_reply_is_recognised_as_our_own() {
    // The calls of a new event after the warm-up (#32): payment with its credit's claim, ledger,
    // the claim DONE, log.
    let base = store("lostreply").await;
    let faulty = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(faulty, 30_000);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_w", "warm", "w_warm", 1, "NGN"))
        )
        .await
        .status,
        200
    );
    for (step, name) in ["payment and claim", "ledger", "finalize", "log"]
        .into_iter()
        .enumerate()
    {
        // GIVEN a delivery whose write at `step` applies, loses its reply, and is retried by the SDK
        let r = format!("lost_{name}");
        let acct = format!("w_{r}");
        let inv = Invocation::new(Some((step, Fault::LostReplyRetried)));

        // WHEN it is processed once
        let answer = invoke(
            inv.clone(),
            send(
                &app,
                signed(&payment_body(&format!("e_{r}"), &r, &acct, 300, "NGN")),
            ),
        )
        .await;

        // THEN it is applied, answered and logged as applied, once (not 409, not a replay, not 503)
        assert!(inv.fired(), "{name}: the fault never fired");
        assert_eq!(
            (answer.status, answer.replayed),
            (200, false),
            "{name}: {}",
            answer.body
        );
        assert_eq!(answer.json()["status"], "applied", "{name}");
        assert_eq!(balance(&base, &acct).await, (300, 1), "{name}");
        assert_eq!(outcomes(&base, &r).await, vec![Outcome::Applied], "{name}");
    }
}

#[tokio::test]
async fn a_takeover_the_sdk_resent_after_a_lost_reply_is_still_a_takeover() {
    use dynamo_claim::{ClaimOutcome, ClaimTable, Fingerprint};
    // GIVEN a claim whose holder died, its lease (1 ms) run out
    let base = store("lostakeover").await;
    let client =
        aws_sdk_dynamodb::Client::from_conf(sdk_builder().interceptor(FaultInjector).build());
    let claims = ClaimTable::new(&client, base.tables().idempotency.clone());
    let fp = Fingerprint::new("facts");
    let first = claims
        .claim("generic:payment:p_lost", &fp, 1)
        .await
        .unwrap();
    assert!(matches!(
        first,
        ClaimOutcome::Claimed {
            took_over: false,
            ..
        }
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // WHEN the retry's takeover (its third call: the put, the read dynalite needs, the takeover)
    // applies, loses its reply, and is sent again by the SDK
    let inv = Invocation::new(Some((2, Fault::LostReplyRetried)));
    let retry = invoke(
        inv.clone(),
        claims.claim("generic:payment:p_lost", &fp, 30_000),
    )
    .await;
    // THEN the retry is told it took over (so its steps look for the earlier attempt's work),
    // not handed the key as a fresh claim
    assert!(inv.fired(), "the fault never fired");
    assert!(
        matches!(
            retry,
            Ok(ClaimOutcome::Claimed {
                took_over: true,
                ..
            })
        ),
        "{retry:?}"
    );
}

#[tokio::test]
async fn an_attempt_that_finds_every_step_done_says_already_applied() {
    // GIVEN an invocation that died after its ledger entry, before finalize
    let base = store("alreadyapplied").await;
    let faulty = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(faulty, LEASE_MS);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_w", "warm", "w_warm", 1, "NGN"))
        )
        .await
        .status,
        200
    );
    let body = payment_body("e_aa", "pay_aa", "w_aa", 250, "NGN");
    // Calls (#32): payment with its credit's claim 0, ledger 1: the crash comes after the entry.
    let inv = Invocation::new(Some((1, Fault::CrashAfter)));
    assert_eq!(
        invoke(inv.clone(), send(&app, signed(&body))).await.status,
        503
    );

    // WHEN the provider retries after the lease expired
    let retried = settle(&app, || signed(&body)).await;

    // THEN the provider gets the applied answer, the log says nothing moved now, and the money
    // moved once
    assert_eq!(
        (retried.status, retried.json()["status"].clone()),
        (200, json!("applied")),
        "{}",
        retried.body
    );
    assert_eq!(
        outcomes(&base, "pay_aa").await.last(),
        Some(&Outcome::AlreadyApplied)
    );
    assert_eq!(balance(&base, "w_aa").await, (250, 1));

    // AND once the claim expired, a dry run predicts no change
    expire_claim(&base, "generic:payment:pay_aa").await;
    let d = base
        .query(
            &LogFilter {
                reference: Some(Reference::parse("pay_aa").unwrap()),
                ..LogFilter::default()
            },
            1,
            None,
        )
        .await
        .unwrap();
    let (providers, _) = config(30_000).providers();
    let pipeline = payhook::pipeline::Pipeline::new(base.clone());
    let predicted = payhook::replay::predict(&pipeline, &providers, &d.deliveries[0])
        .await
        .unwrap();
    assert_eq!(predicted.outcome, Outcome::AlreadyApplied, "{predicted}");
    assert!(predicted.moves.is_empty(), "{predicted}");
}
