//! Disputes (chargebacks), debited and reinstated exactly once (#22): for each provider that
//! reports them, against dynalite through the real router.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use axum::body::Body;
use axum::http::Request;
use common::*;
use payhook::cli::client::sign_headers;
use payhook::config::Config;
use payhook::domain::{AccountId, Currency, ProviderId, Reference};
use payhook::dynamodb::DynamoStore;
use payhook::eventlog::{EventLog, Outcome};
use payhook::http::App;
use payhook::ledger::Ledger;
use payhook::payments::Payments;
use payhook::pipeline::Pipeline;
use payhook::reconcile::{ApiEndpoint, HttpProviderApi, ReconcileSettings, Reconciler};
use payhook::runtime::build_app;
use serde_json::{json, Value};

const LEASE_MS: i64 = 150;
const PAYSTACK: &str = "sk_test_payhook_tests_paystack_secret_key";
const STRIPE: &str = "whsec_payhook_tests_stripe_endpoint_secret";
const FW_V3: &str = "payhook-tests-flutterwave-v3-hash";

fn config() -> Config {
    Config::from_lookup(|name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
        "PAYHOOK_PAYSTACK_SECRETS" => Some(PAYSTACK.to_owned()),
        "PAYHOOK_STRIPE_SECRETS" => Some(STRIPE.to_owned()),
        "PAYHOOK_FLUTTERWAVE_SECRETS" => Some(FW_V3.to_owned()),
        "PAYHOOK_LEASE_MS" => Some(LEASE_MS.to_string()),
        _ => None,
    })
    .unwrap()
}

fn app_of(store: &DynamoStore) -> Arc<App<DynamoStore>> {
    let mut app = build_app(&config(), store.clone());
    Arc::get_mut(&mut app).unwrap().metrics = payhook::metrics::MetricsSink::Off;
    app
}

fn request(provider: ProviderId, body: &str) -> Request<Body> {
    let mut req =
        Request::post(format!("/webhooks/{provider}")).header("content-type", "application/json");
    let id = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|b| b["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "msg".into());
    for (k, v) in sign_headers(provider, &config(), body.as_bytes(), &id, now_s()).unwrap() {
        req = req.header(k, v);
    }
    req.body(Body::from(body.to_owned())).unwrap()
}

async fn deliver(app: &Arc<App<DynamoStore>>, provider: ProviderId, body: &str) -> Resp {
    send(app, request(provider, body)).await
}

/// (balance in `currency`, entries) of `acct`.
async fn balance(store: &DynamoStore, acct: &str, currency: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    let c = Currency::parse(currency).unwrap();
    (b.balances.get(&c).copied().unwrap_or(0), b.entries)
}

// ------------------------------------------------------------------------------------ payloads

fn stripe_intent(pi: &str, amount: i64) -> String {
    json!({"id": format!("evt_pay_{pi}"), "object": "event", "type": "payment_intent.succeeded",
        "data": {"object": {"id": pi, "object": "payment_intent", "amount": amount,
            "amount_received": amount, "currency": "usd", "status": "succeeded",
            "metadata": {"account": "w_stripe"}}}})
    .to_string()
}

fn stripe_refund(pi: &str, re: &str, amount: i64) -> String {
    json!({"id": format!("evt_{re}"), "object": "event", "type": "refund.created",
        "data": {"object": {"id": re, "object": "refund", "amount": amount, "currency": "usd",
            "payment_intent": pi, "status": "succeeded"}}})
    .to_string()
}

/// A Stripe dispute event of `pi` whose balance transactions are `(category, amount)`.
fn stripe_dispute(kind: &str, dp: &str, pi: &str, amount: i64, txns: &[(&str, i64)]) -> String {
    let txns: Vec<Value> = txns
        .iter()
        .enumerate()
        .map(|(i, (category, a))| {
            json!({"id": format!("txn_{dp}_{i}"), "object": "balance_transaction", "amount": a,
                "currency": "usd", "fee": if *a < 0 { 1500 } else { 0 }, "net": a,
                "reporting_category": category, "type": "adjustment", "source": dp})
        })
        .collect();
    let status = if txns.is_empty() {
        "warning_needs_response"
    } else {
        "needs_response"
    };
    json!({"id": format!("evt_{kind}_{dp}"), "object": "event", "type": kind,
        "data": {"object": {"id": dp, "object": "dispute", "amount": amount, "currency": "usd",
            "charge": format!("ch_{pi}"), "payment_intent": pi, "status": status,
            "balance_transactions": txns}}})
    .to_string()
}

fn withdrawn(dp: &str, pi: &str, amount: i64) -> String {
    stripe_dispute(
        "charge.dispute.funds_withdrawn",
        dp,
        pi,
        amount,
        &[("dispute", -amount)],
    )
}

fn reinstated(dp: &str, pi: &str, amount: i64) -> String {
    stripe_dispute(
        "charge.dispute.funds_reinstated",
        dp,
        pi,
        amount,
        &[("dispute", -amount), ("dispute_reversal", amount)],
    )
}

fn paystack_charge(reference: &str, amount: i64) -> String {
    json!({"event": "charge.success", "data": {"id": 1, "status": "success",
        "reference": reference, "amount": amount, "currency": "NGN",
        "metadata": {"account": "w_paystack"}}})
    .to_string()
}

fn paystack_resolve(id: i64, reference: &str, refund_amount: i64, resolution: &str) -> String {
    json!({"event": "charge.dispute.resolve", "data": {"id": id, "refund_amount": refund_amount,
        "currency": "NGN", "status": "resolved", "resolution": resolution, "domain": "test",
        "category": "chargeback", "transaction": {"id": 1, "reference": reference,
        "amount": refund_amount, "currency": "NGN", "status": "reversed"}}})
    .to_string()
}

fn paystack_refund(refund_id: i64, reference: &str, amount: i64) -> String {
    json!({"event": "refund.processed", "data": {"id": refund_id, "status": "processed",
        "transaction_reference": reference, "amount": amount.to_string(), "currency": "NGN"}})
    .to_string()
}

fn generic_dispute(kind: &str, dispute: &str, reference: &str, amount: i64) -> String {
    event_body(
        &format!("e_{kind}_{dispute}"),
        kind,
        json!({"dispute": dispute, "reference": reference, "amount": amount, "currency": "NGN"}),
    )
}

// --------------------------------------------------------------------------------------- tests

#[tokio::test]
async fn a_withdrawal_debits_once_under_twenty_concurrent_duplicates_for_each_provider() {
    // GIVEN a paid payment with each provider
    let store = store("dp_race").await;
    let app = app_of(&store);
    let cases = [
        (
            ProviderId::GENERIC,
            payment_body("e_pay", "pay_g", "w_generic", 10_000, "NGN"),
            generic_dispute("dispute.funds_withdrawn", "dsp_g", "pay_g", 4_000),
            ("w_generic", "NGN", 6_000),
        ),
        (
            ProviderId::STRIPE,
            stripe_intent("pi_race", 4_999),
            withdrawn("dp_race", "pi_race", 4_999),
            ("w_stripe", "USD", 0),
        ),
        (
            ProviderId::PAYSTACK,
            paystack_charge("T_race", 500_000),
            paystack_resolve(7, "T_race", 200_000, "merchant-accepted"),
            ("w_paystack", "NGN", 300_000),
        ),
    ];
    for (provider, pay, dispute, (acct, currency, left)) in cases {
        assert_eq!(deliver(&app, provider, &pay).await.status, 200);

        // WHEN the withdrawal arrives twenty times at once
        let answers =
            futures::future::join_all((0..20).map(|_| deliver(&app, provider, &dispute))).await;

        // THEN it is debited once: one fresh answer, the rest replays or in-flight retries
        let fresh = answers
            .iter()
            .filter(|a| a.status == 200 && !a.replayed)
            .count();
        assert_eq!(fresh, 1, "{provider}: {answers:?}");
        assert!(
            answers.iter().all(|a| a.status == 200 || a.status == 409),
            "{answers:?}"
        );
        assert_eq!(
            balance(&store, acct, currency).await,
            (left, 2),
            "{provider}"
        );
    }
}

#[tokio::test]
async fn a_reinstatement_credits_once_and_waits_for_its_withdrawal() {
    // GIVEN two paid Stripe payments of 3,100
    let store = store("dp_order").await;
    let app = app_of(&store);
    for pi in ["pi_a", "pi_b"] {
        assert_eq!(
            deliver(&app, ProviderId::STRIPE, &stripe_intent(pi, 3_100))
                .await
                .status,
            200
        );
    }

    // WHEN one dispute is withdrawn then reinstated, each event twice
    for body in [
        withdrawn("dp_a", "pi_a", 3_100),
        reinstated("dp_a", "pi_a", 3_100),
    ] {
        let first = deliver(&app, ProviderId::STRIPE, &body).await;
        assert_eq!(
            (first.status, first.replayed),
            (200, false),
            "{}",
            first.body
        );
        let again = deliver(&app, ProviderId::STRIPE, &body).await;
        assert_eq!((again.status, again.replayed), (200, true));
    }
    assert_eq!(balance(&store, "w_stripe", "USD").await, (6_200, 4));

    // AND the other's reinstatement arrives before its withdrawal, twice
    let early = reinstated("dp_b", "pi_b", 3_100);
    for _ in 0..2 {
        let r = deliver(&app, ProviderId::STRIPE, &early).await;
        assert_eq!(
            (r.status, r.json()["error"].clone()),
            (409, json!("withdrawal_not_applied")),
            "{}",
            r.body
        );
    }

    // THEN nothing is spendable before the withdrawal: no 6,200 on a 3,100 payment
    assert_eq!(balance(&store, "w_stripe", "USD").await, (6_200, 4));

    // WHEN the withdrawal comes, then a reconciliation pass runs, then Stripe redelivers
    let w = deliver(&app, ProviderId::STRIPE, &withdrawn("dp_b", "pi_b", 3_100)).await;
    assert_eq!(w.status, 200, "{}", w.body);
    assert_eq!(balance(&store, "w_stripe", "USD").await, (3_100, 5));
    reconcile(&store).await;
    let late = deliver(&app, ProviderId::STRIPE, &early).await;

    // THEN the pass applied the parked reinstatement and the redelivery is a replay: both
    // payments converge to the provider's truth, once each way
    assert_eq!((late.status, late.replayed), (200, true), "{}", late.body);
    assert_eq!(balance(&store, "w_stripe", "USD").await, (6_200, 6));
    let p = store
        .payment(ProviderId::STRIPE, &Reference::parse("pi_b").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.disputes.len(), 1);
    assert_eq!(
        (
            p.disputes[0].status,
            p.disputes[0].withdrawn_minor,
            p.disputes[0].reinstated_minor
        ),
        ("funds_reinstated", 3_100, 3_100)
    );
    assert_eq!(p.disputed_minor, 0);
}

/// A reconciliation pass that needs no provider API (nothing is old enough to ask about, and
/// the dispute list is refused at once).
async fn reconcile(store: &DynamoStore) {
    reconcile_with(store, ProviderId::STRIPE, "http://127.0.0.1:9").await;
}

#[tokio::test]
async fn a_dispute_before_its_payment_is_parked_and_applied_once_it_is_paid() {
    // GIVEN a withdrawal that arrives before the payment's success
    let store = store("dp_early").await;
    let app = app_of(&store);
    let dispute = withdrawn("dp_early", "pi_early", 3_000);
    let early = deliver(&app, ProviderId::STRIPE, &dispute).await;
    assert_eq!(
        (early.status, early.json()["error"].clone()),
        (409, json!("payment_not_paid")),
        "{}",
        early.body
    );
    assert_eq!(counts(&store).await[2], 0, "nothing posted");

    // WHEN the payment succeeds and a reconciliation pass runs, then the provider redelivers
    assert_eq!(
        deliver(&app, ProviderId::STRIPE, &stripe_intent("pi_early", 3_000))
            .await
            .status,
        200
    );
    reconcile(&store).await;
    let late = deliver(&app, ProviderId::STRIPE, &dispute).await;

    // THEN the pass applied it and the redelivery is a replay: debited once
    assert_eq!((late.status, late.replayed), (200, true), "{}", late.body);
    assert_eq!(balance(&store, "w_stripe", "USD").await, (0, 2));
}

#[tokio::test]
async fn a_withdrawal_replayed_after_its_claim_expired_debits_nothing_more() {
    // GIVEN a withdrawal applied on a generic payment
    let store = store("dp_expired").await;
    let app = app_of(&store);
    let pay = payment_body("e_p", "pay_x", "w_x", 9_000, "NGN");
    assert_eq!(deliver(&app, ProviderId::GENERIC, &pay).await.status, 200);
    let dispute = generic_dispute("dispute.funds_withdrawn", "dsp_x", "pay_x", 9_000);
    assert_eq!(
        deliver(&app, ProviderId::GENERIC, &dispute).await.status,
        200
    );

    // WHEN its claim is gone, as a withdrawal applied by the release before #44 whose
    // claims-table claim expired (TTL): its claim held on the payment is removed, and the
    // provider sends it again
    store
        .client()
        .update_item()
        .table_name(store.tables().payments.clone())
        .key("pk", AttributeValue::S("generic#pay_x".into()))
        .update_expression("REMOVE #rc")
        .condition_expression("attribute_exists(#rc)")
        .expression_attribute_names("#rc", "rc#generic:dispute_withdrawal:dsp_x")
        .send()
        .await
        .expect("the withdrawal's claim was held on its payment");
    let again = deliver(&app, ProviderId::GENERIC, &dispute).await;

    // THEN every step is found done: nothing more is debited, and the log says so
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(balance(&store, "w_x", "NGN").await, (0, 2));
    let outcomes: Vec<Outcome> = store
        .query(
            &payhook::eventlog::LogFilter {
                reference: Some(Reference::parse("pay_x").unwrap()),
                ..Default::default()
            },
            10,
            None,
        )
        .await
        .unwrap()
        .deliveries
        .iter()
        .map(|d| d.outcome)
        .collect();
    assert!(outcomes.contains(&Outcome::AlreadyApplied), "{outcomes:?}");
}

/// A paid Paystack charge of 300,000 kobo on `w_paystack` (its own table set).
async fn paystack_paid(name: &str, reference: &str) -> (DynamoStore, Arc<App<DynamoStore>>) {
    let store = store(name).await;
    let app = app_of(&store);
    let paid = deliver(
        &app,
        ProviderId::PAYSTACK,
        &paystack_charge(reference, 300_000),
    )
    .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    (store, app)
}

#[tokio::test]
async fn a_paystack_dispute_and_its_refund_debit_once_in_either_order() {
    for dispute_first in [true, false] {
        // GIVEN a paid charge of 300,000 whose dispute the merchant accepts for 180,000, which
        // Paystack takes by refunding the customer (so a refund of 180,000 reports it too)
        let name = if dispute_first {
            "dp_pair_d"
        } else {
            "dp_pair_r"
        };
        let (store, app) = paystack_paid(name, "T_pair").await;
        let resolve = paystack_resolve(9, "T_pair", 180_000, "merchant-accepted");
        let refund = paystack_refund(77, "T_pair", 180_000);
        let (first, second) = if dispute_first {
            (&resolve, &refund)
        } else {
            (&refund, &resolve)
        };

        // WHEN both reports arrive, in this order, each twice
        let a = deliver(&app, ProviderId::PAYSTACK, first).await;
        let b = deliver(&app, ProviderId::PAYSTACK, second).await;
        let b_again = deliver(&app, ProviderId::PAYSTACK, second).await;

        // THEN each signed, well-formed delivery is answered 2xx; the first debits, the second
        // says it moved nothing, and its duplicate gets the same stored answer
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json()["moved_minor"], Value::Null, "{}", a.body);
        assert_eq!(
            (b.status, b.json()["moved_minor"].clone()),
            (200, json!(0)),
            "{}",
            b.body
        );
        assert_eq!(b_again.body, b.body);
        // AND the account holds 300,000 - 180,000, from one credit and one debit
        assert_eq!(
            balance(&store, "w_paystack", "NGN").await,
            (120_000, 2),
            "dispute first: {dispute_first}"
        );
        // AND the payment lists both: 180,000 refunded, 180,000 disputed, 120,000 still refundable
        let p = store
            .payment(ProviderId::PAYSTACK, &Reference::parse("T_pair").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((p.refunded_minor, p.disputed_minor), (180_000, 180_000));
        assert_eq!(p.disputes.len(), 1);
        assert_eq!(p.disputes[0].withdrawn_minor, 180_000);
        let rest = deliver(
            &app,
            ProviderId::PAYSTACK,
            &paystack_refund(78, "T_pair", 120_000),
        )
        .await;
        assert_eq!(rest.status, 200, "{}", rest.body);
        let over = deliver(
            &app,
            ProviderId::PAYSTACK,
            &paystack_refund(79, "T_pair", 1),
        )
        .await;
        assert_eq!(
            over.json()["error"],
            json!("refund_exceeds_payment"),
            "{}",
            over.body
        );
        assert_eq!(balance(&store, "w_paystack", "NGN").await, (0, 3));
    }
}

#[tokio::test]
async fn a_paystack_dispute_and_its_refund_debit_once_under_ten_concurrent_deliveries_each() {
    // GIVEN a paid charge of 300,000
    let (store, app) = paystack_paid("dp_pair_race", "T_race").await;

    // WHEN the accepted dispute (50,000) and its refund arrive ten times each, all at once
    let resolve = paystack_resolve(21, "T_race", 50_000, "merchant-accepted");
    let refund = paystack_refund(88, "T_race", 50_000);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (app, body) = (
            app.clone(),
            if i % 2 == 0 {
                resolve.clone()
            } else {
                refund.clone()
            },
        );
        tasks.push(tokio::spawn(async move {
            deliver(&app, ProviderId::PAYSTACK, &body).await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }

    // THEN nothing is refused for good (a lost race is retried, never a final 4xx)
    for a in &answers {
        assert!(
            a.status == 200 || a.status >= 500 || a.status == 409,
            "{} {}",
            a.status,
            a.body
        );
    }
    // AND once the provider's retries land, 50,000 left the account once
    for body in [&resolve, &refund] {
        let again = deliver(&app, ProviderId::PAYSTACK, body).await;
        assert_eq!(again.status, 200, "{}", again.body);
    }
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (250_000, 2));
}

#[tokio::test]
async fn a_refund_and_a_dispute_of_other_amounts_are_two_outflows() {
    // GIVEN a paid charge of 300,000 with a manual refund of 100,000
    let (store, app) = paystack_paid("dp_pair_two", "T_two").await;
    let manual = deliver(
        &app,
        ProviderId::PAYSTACK,
        &paystack_refund(1, "T_two", 100_000),
    )
    .await;
    assert_eq!(manual.status, 200, "{}", manual.body);

    // WHEN a dispute is then accepted for 200,000 (the rest)
    let resolve = paystack_resolve(5, "T_two", 200_000, "merchant-accepted");
    let taken = deliver(&app, ProviderId::PAYSTACK, &resolve).await;

    // THEN it is debited at once: nothing spendable that the provider took
    assert_eq!(taken.status, 200, "{}", taken.body);
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (0, 3));

    // WHEN the dispute's own refund of 200,000 arrives
    let its_refund = deliver(
        &app,
        ProviderId::PAYSTACK,
        &paystack_refund(2, "T_two", 200_000),
    )
    .await;

    // THEN it is the dispute's money already counted: 2xx, nothing moves
    assert_eq!(
        (its_refund.status, its_refund.json()["moved_minor"].clone()),
        (200, json!(0)),
        "{}",
        its_refund.body
    );
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (0, 3));
}

/// M3 of the #30 red team: a manual refund of exactly the amount a dispute then takes pairs
/// with that dispute's withdrawal (neither payload names the other); when the dispute's own
/// refund arrives it was refused 422 for good (the payment looked fully refunded). It repeats
/// the paired withdrawal's money, so it debits, once; a further refund is still refused.
#[tokio::test]
async fn the_disputes_own_refund_after_a_manual_refund_of_its_amount_debits_once() {
    // GIVEN a paid charge of 300,000, a manual refund of all of it, and a dispute of 300,000
    // accepted after it (paired with the manual refund: debits nothing)
    let (store, app) = paystack_paid("dp_pair_wrong", "T_wrong").await;
    let manual = paystack_refund(11, "T_wrong", 300_000);
    assert_eq!(
        deliver(&app, ProviderId::PAYSTACK, &manual).await.status,
        200
    );
    let resolve = paystack_resolve(12, "T_wrong", 300_000, "merchant-accepted");
    let taken = deliver(&app, ProviderId::PAYSTACK, &resolve).await;
    assert_eq!(taken.status, 200, "{}", taken.body);
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (0, 2));

    // WHEN the dispute's own refund of 300,000 arrives, twice
    let its_refund = paystack_refund(13, "T_wrong", 300_000);
    let first = deliver(&app, ProviderId::PAYSTACK, &its_refund).await;
    let again = deliver(&app, ProviderId::PAYSTACK, &its_refund).await;

    // THEN Paystack's word is followed: it debits 300,000 once (both refunds left)
    assert_eq!(
        (first.status, first.json()["status"].clone()),
        (200, json!("applied")),
        "{}",
        first.body
    );
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (-300_000, 3));

    // AND a third refund of that amount repeats nothing: refused as before
    let third = deliver(
        &app,
        ProviderId::PAYSTACK,
        &paystack_refund(14, "T_wrong", 300_000),
    )
    .await;
    assert_eq!(third.status, 422, "{}", third.body);
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (-300_000, 3));
}

/// A refund of the money a won dispute gave back, on a payment whose other refund had taken
/// all that remained: the reinstatement made it refundable again, so the refund applies (it
/// was answered 409 `in_flight` on every redelivery: the write wanted a status the payment,
/// still REFUNDED, could not have).
#[tokio::test]
async fn a_refund_of_reinstated_money_applies_on_a_payment_refunded_before_the_reinstatement() {
    // GIVEN a paid Stripe payment of 100, a dispute withdrawal of 40, a refund of the other 60
    let store = store("dp_reinstated_refund").await;
    let app = app_of(&store);
    for body in [
        stripe_intent("pi_rr", 100),
        withdrawn("dp_rr", "pi_rr", 40),
        stripe_refund("pi_rr", "re_rr1", 60),
        reinstated("dp_rr", "pi_rr", 40),
    ] {
        let r = deliver(&app, ProviderId::STRIPE, &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(balance(&store, "w_stripe", "USD").await, (40, 4));

    // WHEN the reinstated 40 is refunded, twice
    let refund = stripe_refund("pi_rr", "re_rr2", 40);
    let first = deliver(&app, ProviderId::STRIPE, &refund).await;
    let again = deliver(&app, ProviderId::STRIPE, &refund).await;

    // THEN it applies once: nothing left on the account, the payment fully refunded
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        (again.status, again.replayed),
        (200, true),
        "{}",
        again.body
    );
    assert_eq!(balance(&store, "w_stripe", "USD").await, (0, 5));
    // AND a refund of one more cent is refused, final
    let over = deliver(
        &app,
        ProviderId::STRIPE,
        &stripe_refund("pi_rr", "re_rr3", 1),
    )
    .await;
    assert_eq!(over.status, 422, "{}", over.body);
}

#[tokio::test]
async fn a_declined_paystack_dispute_is_listed_on_its_payment_and_moves_nothing() {
    // GIVEN a paid charge
    let (store, app) = paystack_paid("dp_declined", "T_won").await;

    // WHEN its dispute is declined (the merchant won), delivered twice, and the notices of
    // another dispute's creation arrive
    let declined = paystack_resolve(10, "T_won", 300_000, "declined");
    let first = deliver(&app, ProviderId::PAYSTACK, &declined).await;
    let again = deliver(&app, ProviderId::PAYSTACK, &declined).await;
    let created = paystack_resolve(11, "T_won", 300_000, "merchant-accepted")
        .replace("charge.dispute.resolve", "charge.dispute.create");
    let notice = deliver(&app, ProviderId::PAYSTACK, &created).await;

    // THEN it is recorded, once, and moves nothing; the notice is ignored
    assert_eq!(
        (first.status, first.json()["status"].clone()),
        (200, json!("recorded")),
        "{}",
        first.body
    );
    assert_eq!(again.body, first.body);
    assert_eq!(notice.json()["status"], json!("ignored"), "{}", notice.body);
    assert_eq!(balance(&store, "w_paystack", "NGN").await, (300_000, 1));
    // AND the payment lists the dispute as declined
    let p = store
        .payment(ProviderId::PAYSTACK, &Reference::parse("T_won").unwrap())
        .await
        .unwrap()
        .unwrap();
    let listed: Vec<(&str, &str, i64)> = p
        .disputes
        .iter()
        .map(|d| (d.dispute.as_str(), d.status, d.withdrawn_minor))
        .collect();
    assert_eq!(listed, vec![("10", "declined", 0)]);
}

#[tokio::test]
async fn an_inquiry_moves_nothing_and_a_dispute_of_a_refunded_charge_debits_what_moved() {
    // GIVEN a Stripe payment of 4,999 of which 1,000 was refunded
    let store = store("dp_partial").await;
    let app = app_of(&store);
    assert_eq!(
        deliver(&app, ProviderId::STRIPE, &stripe_intent("pi_p", 4_999))
            .await
            .status,
        200
    );
    assert_eq!(
        deliver(
            &app,
            ProviderId::STRIPE,
            &stripe_refund("pi_p", "re_p", 1_000)
        )
        .await
        .status,
        200
    );
    let before = counts(&store).await;

    // WHEN an inquiry opens (no money withdrawn)
    let inquiry = stripe_dispute("charge.dispute.created", "du_q", "pi_p", 4_999, &[]);
    let answer = deliver(&app, ProviderId::STRIPE, &inquiry).await;

    // THEN nothing moves
    assert_eq!(answer.json()["status"], json!("ignored"));
    assert_eq!(counts(&store).await[2], before[2], "no ledger entry");

    // WHEN a chargeback of the whole 4,999 withdraws what is left, 3,999 (and its fee), first
    // with the dispute's creation then with funds_withdrawn
    let txns = [("dispute", -3_999)];
    for kind in ["charge.dispute.created", "charge.dispute.funds_withdrawn"] {
        let body = stripe_dispute(kind, "dp_p", "pi_p", 4_999, &txns);
        assert_eq!(deliver(&app, ProviderId::STRIPE, &body).await.status, 200);
    }

    // THEN the balance transaction's amount is debited, once, the fee left out
    assert_eq!(balance(&store, "w_stripe", "USD").await, (0, 3));
    let p = store
        .payment(ProviderId::STRIPE, &Reference::parse("pi_p").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            p.disputes[0].dispute.as_str(),
            p.disputes[0].status,
            p.disputes[0].withdrawn_minor
        ),
        ("dp_p", "funds_withdrawn", 3_999)
    );
    assert_eq!(p.disputed_minor, 3_999);
}

/// A fake provider API on loopback answering `GET {path}?{query…}` (the query must hold
/// `query`) with `list`, and counting those calls; anything else is 404.
async fn fake_list(
    path: &'static str,
    query: &'static str,
    list: Value,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let (list, counted) = (list.clone(), counted.clone());
        async move {
            if uri.path() != path || !uri.query().unwrap_or("").contains(query) {
                return (axum::http::StatusCode::NOT_FOUND, String::new());
            }
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (axum::http::StatusCode::OK, list.to_string())
        }
    });
    (serve_fake(app).await, calls)
}

async fn reconcile_with(
    store: &DynamoStore,
    provider: ProviderId,
    base_url: &str,
) -> payhook::reconcile::Report {
    let (providers, _) = config().providers();
    let api = HttpProviderApi::new(vec![ApiEndpoint {
        provider,
        base_url: base_url.to_owned(),
        api_key: "sk_test_k".into(),
        basic_auth: false,
    }])
    .unwrap();
    let pipeline = Pipeline::new(store.clone());
    Reconciler {
        pipeline: &pipeline,
        providers: &providers,
        api: &api,
        settings: ReconcileSettings {
            lease_ms: 5_000,
            ..ReconcileSettings::default()
        },
    }
    .run()
    .await
    .unwrap()
}

#[tokio::test]
async fn reconciliation_applies_a_dispute_whose_webhooks_never_came_and_a_second_pass_nothing() {
    // GIVEN a paid Stripe payment, and Stripe's dispute list holding a chargeback of it that
    // was won (withdrawn, then reinstated) and one of another payment withdrawn; none of their
    // webhooks came
    let store = store("dp_reconcile").await;
    let app = app_of(&store);
    for pi in ["pi_r1", "pi_r2"] {
        assert_eq!(
            deliver(&app, ProviderId::STRIPE, &stripe_intent(pi, 2_500))
                .await
                .status,
            200
        );
    }
    let dispute =
        |body: String| serde_json::from_str::<Value>(&body).unwrap()["data"]["object"].clone();
    let list = json!({"object": "list", "url": "/v1/disputes", "has_more": false, "data": [
        dispute(reinstated("dp_r1", "pi_r1", 2_500)),
        dispute(withdrawn("dp_r2", "pi_r2", 1_000)),
    ]});
    let (url, calls) = fake_list("/v1/disputes", "created%5Bgte%5D=", list).await;

    // WHEN a reconciliation pass runs, then another
    let first = reconcile_with(&store, ProviderId::STRIPE, &url).await;
    let after_first = balance(&store, "w_stripe", "USD").await;
    let second = reconcile_with(&store, ProviderId::STRIPE, &url).await;

    // THEN the first applies the three movements, the second reads them and changes nothing
    let disputes =
        |r: &payhook::reconcile::Report| r.completed.iter().filter(|f| f.kind == "dispute").count();
    assert_eq!(disputes(&first), 3, "{first:?}");
    assert_eq!(after_first, (5_000 - 2_500 + 2_500 - 1_000, 5));
    assert_eq!(disputes(&second), 0, "{second:?}");
    assert_eq!(balance(&store, "w_stripe", "USD").await, after_first);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);

    // AND a webhook that comes late is a replay of what reconciliation applied
    let late = deliver(
        &app,
        ProviderId::STRIPE,
        &withdrawn("dp_r2", "pi_r2", 1_000),
    )
    .await;
    assert_eq!((late.status, late.replayed), (200, true), "{}", late.body);
    assert_eq!(balance(&store, "w_stripe", "USD").await, after_first);
}

#[tokio::test]
async fn flutterwave_chargebacks_reach_the_balance_through_reconciliation_priced_exactly() {
    // GIVEN two Flutterwave payments (1,250.50 and 300 NGN), and its chargeback list holding a
    // lost chargeback of the first and a won one of the second (Flutterwave sends no webhook)
    let store = store("dp_flutterwave").await;
    let app = app_of(&store);
    for (id, tx_ref, amount) in [(9001, "ord_fw1", "1250.5"), (9002, "ord_fw2", "300")] {
        let body = format!(
            r#"{{"event":"charge.completed","data":{{"id":{id},"tx_ref":"{tx_ref}","flw_ref":"FLW-{id}","amount":{amount},"currency":"NGN","status":"successful","meta":{{"account":"w_fw"}}}}}}"#
        );
        let r = deliver(&app, ProviderId::FLUTTERWAVE, &body).await;
        assert_eq!(r.json()["status"], json!("applied"), "{}", r.body);
    }
    let list: Value = serde_json::from_str(
        r#"{"status":"success","message":"Chargebacks fetched",
            "meta":{"page_info":{"total":2,"current_page":1,"total_pages":1,"page_size":20}},
            "data":[
              {"id":1390,"amount":1250.5,"flw_ref":"FLW-9001","status":"lost","stage":"new","transaction_id":9001,"tx_ref":"ord_fw1"},
              {"id":1391,"amount":300,"flw_ref":"FLW-9002","status":"won","stage":"new","transaction_id":9002,"tx_ref":"ord_fw2"}]}"#,
    )
    .unwrap();
    let (url, calls) = fake_list("/v3/chargebacks", "from=", list).await;

    // WHEN two reconciliation passes run
    let first = reconcile_with(&store, ProviderId::FLUTTERWAVE, &url).await;
    let after_first = balance(&store, "w_fw", "NGN").await;
    let second = reconcile_with(&store, ProviderId::FLUTTERWAVE, &url).await;

    // THEN the lost one is withdrawn and the won one withdrawn and reinstated, each priced in
    // kobo from the number as written, once (125,050 + 30,000 - 125,050 - 30,000 + 30,000, five
    // entries); the second pass changes nothing
    let disputes =
        |r: &payhook::reconcile::Report| r.completed.iter().filter(|f| f.kind == "dispute").count();
    assert_eq!(disputes(&first), 3, "{first:?}");
    assert_eq!(after_first, (30_000, 5));
    assert_eq!(disputes(&second), 0, "{second:?}");
    assert_eq!(balance(&store, "w_fw", "NGN").await, after_first);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}
