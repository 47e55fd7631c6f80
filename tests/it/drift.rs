//! Balances that cannot drift (#21): no process's clock, no upgrade from the previous schema and
//! no odd order of events may lose or repeat money. One test per path that used to, each against
//! dynalite through the real router; tests/it/drift_model.rs generates the interleavings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use payhook::domain::{AccountId, Currency, Money, ProviderId, Reference};
use payhook::dynamodb::{DynamoStore, StoreClock, StoreSettings};
use payhook::http::App;
use payhook::ledger::{Ledger, Posting};
use payhook::payments::{ExpectedPayment, Payments, RegisterOutcome};
use serde_json::json;

const LEASE_MS: i64 = 150;
const MINUTE_MS: i64 = 60_000;

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

/// (NGN balance, entries) as `reader` reads it.
async fn balance(reader: &DynamoStore, acct: &str) -> (i64, u64) {
    let b = reader
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (b.balances.get(&ngn()).copied().unwrap_or(0), b.entries)
}

/// (sum, count) of the entries listed one by one: what the balance must equal.
async fn listed(store: &DynamoStore, acct: &str) -> (i64, u64) {
    let entries = store
        .entries(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (
        entries.iter().map(|p| p.amount_minor).sum(),
        entries.len() as u64,
    )
}

fn refund_body(event_id: &str, kind: &str, refund: &str, payment: &str, amount: i64) -> String {
    event_body(
        event_id,
        kind,
        json!({"reference": refund, "payment_reference": payment, "amount": amount, "currency": "NGN"}),
    )
}

async fn deliver(app: &Arc<App<DynamoStore>>, body: &str) -> Resp {
    send(app, signed(body)).await
}

/// Every checkpoint item of the ledger table: (pk, through).
async fn checkpoints(store: &DynamoStore) -> Vec<(String, String)> {
    scan(store, &store.tables().ledger)
        .await
        .iter()
        .filter(|i| {
            i.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str) == Some("#checkpoint")
        })
        .map(|i| {
            let text = |k: &str| {
                i.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            (text("pk"), text("through"))
        })
        .collect()
}

#[tokio::test]
async fn no_clock_of_a_reader_or_a_writer_moves_a_checkpoint_past_entries_still_to_come() {
    // GIVEN an account with entries made ten minutes ago in each shard, and stores that read
    // every shard's checkpoint forward as soon as one entry follows it
    let rolling = StoreSettings {
        roll_after_entries: 1,
        ..settings()
    };
    let base = store("drift_clock").await;
    let on = |skew_ms: i64| {
        DynamoStore::with_clock(
            aws_sdk_dynamodb::Client::from_conf(sdk_builder().build()),
            base.tables().clone(),
            rolling,
            StoreClock::with_local_skew_ms(skew_ms),
        )
    };
    let (correct, fast, slow) = (on(0), on(250_000), on(-10 * MINUTE_MS));
    let acct = AccountId::parse("w_clock").unwrap();
    balance(&correct, "w_clock").await; // one answer teaches the store the server's time
    let ten_minutes_ago = correct.clock().now_ms() - 10 * MINUTE_MS;
    for shard in 0..4u32 {
        let key = format!("generic:payment:old{shard}");
        correct
            .post(&Posting {
                key: payhook::domain::IdempotencyKey::from_stored(key),
                account: acct.clone(),
                shard,
                at_ms: Some(ten_minutes_ago + i64::from(shard)),
                currency: ngn(),
                amount_minor: 314,
                reference: Reference::parse(&format!("old{shard}")).unwrap(),
                posted_at_ms: ten_minutes_ago,
            })
            .await
            .unwrap();
    }

    // WHEN an operator laptop 250 s fast reads the balance (and rolls every checkpoint)
    assert_eq!(balance(&fast, "w_clock").await, (1_256, 4));
    let now = correct.clock().now_ms();
    let rolled = checkpoints(&base).await;
    assert_eq!(rolled.len(), 4, "every shard rolled: {rolled:?}");
    for (pk, through) in &rolled {
        let through_ms: i64 = through[..13].parse().unwrap();
        assert!(
            through_ms <= now - MINUTE_MS + 2_000,
            "{pk} rolled through {through_ms}, {} s past the server's now - margin",
            (through_ms - (now - MINUTE_MS)) / 1_000
        );
    }

    // AND a correctly clocked server then credits 70,000 and refunds 300, and a server whose
    // clock is ten minutes slow credits 900
    let server = app(correct.clone(), LEASE_MS);
    let behind = app(slow.clone(), LEASE_MS);
    let credit = payment_body("e_70k", "pay_70k", "w_clock", 70_000, "NGN");
    assert_eq!(deliver(&server, &credit).await.status, 200);
    let refund = refund_body("e_r300", "refund.succeeded", "re_300", "pay_70k", 300);
    assert_eq!(deliver(&server, &refund).await.status, 200);
    let late = payment_body("e_900", "pay_900", "w_clock", 900, "NGN");
    assert_eq!(deliver(&behind, &late).await.status, 200);

    // THEN every reader, whatever its clock, reads every entry: the sum of the entries listed
    let want = (1_256 + 70_000 - 300 + 900, 7);
    assert_eq!(listed(&correct, "w_clock").await, want);
    for (name, reader) in [
        ("fast", &fast),
        ("correct", &correct),
        ("slow", &slow),
        ("fast again", &fast),
    ] {
        assert_eq!(balance(reader, "w_clock").await, want, "{name} reader");
    }
}

/// Rewrites a payment and its account's entries into the previous release's shape: no
/// `credit_at_ms` on the payment, every entry under the bare key.
async fn to_previous_schema(store: &DynamoStore, reference: &str, acct: &str) {
    store
        .client()
        .update_item()
        .table_name(store.tables().payments.clone())
        .key("pk", AttributeValue::S(format!("generic#{reference}")))
        .update_expression("REMOVE credit_at_ms")
        .send()
        .await
        .unwrap();
    bare_entries(store, acct, |_| true).await;
}

/// Moves `acct`'s timed entries whose key `pick`s to the bare sort key (as the previous release
/// wrote them).
async fn bare_entries(store: &DynamoStore, acct: &str, pick: impl Fn(&str) -> bool) {
    let table = store.tables().ledger.clone();
    for item in scan(store, &table).await {
        let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let (Some(sk), Some(key)) = (text("sk"), text("key")) else {
            continue;
        };
        if text("account").as_deref() != Some(acct) || sk == key || !pick(&key) {
            continue;
        }
        let pk = item["pk"].clone();
        store
            .client()
            .delete_item()
            .table_name(&table)
            .key("pk", pk)
            .key("sk", AttributeValue::S(sk))
            .send()
            .await
            .unwrap();
        let mut bare: HashMap<String, AttributeValue> = item.clone();
        bare.insert("sk".into(), AttributeValue::S(key));
        store
            .client()
            .put_item()
            .table_name(&table)
            .set_item(Some(bare))
            .send()
            .await
            .unwrap();
    }
}

/// The claim of `key` as an attempt that posted and died before finalize left it: IN_PROGRESS,
/// another owner, its lease long expired.
async fn unfinished_claim(store: &DynamoStore, key: &str) {
    store
        .client()
        .update_item()
        .table_name(store.tables().idempotency.clone())
        .key("pk", AttributeValue::S(key.into()))
        .update_expression(
            "SET #status = :ip, #owner = :o, lease_expires_at_ms = :zero, #open = :open \
             REMOVE response_status, response_body, expires_at_s",
        )
        .expression_attribute_names("#status", "status")
        .expression_attribute_names("#owner", "owner")
        .expression_attribute_names("#open", "open")
        .expression_attribute_values(":ip", AttributeValue::S("IN_PROGRESS".into()))
        .expression_attribute_values(":o", AttributeValue::S("previous-release".into()))
        .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        .expression_attribute_values(":open", AttributeValue::S("IN_PROGRESS#0".into()))
        .send()
        .await
        .unwrap();
}

async fn forget_claim(store: &DynamoStore, key: &str) {
    store
        .client()
        .delete_item()
        .table_name(store.tables().idempotency.clone())
        .key("pk", AttributeValue::S(key.into()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn retries_of_every_movement_of_a_previous_schema_payment_meet_its_entries() {
    // GIVEN a payment credited 1,000 and refunded 300, stored as the previous release stored it
    let store = store("drift_schema").await;
    let app = app(store.clone(), LEASE_MS);
    let credit = payment_body("e_c", "pay_old", "w_old", 1_000, "NGN");
    let refund = refund_body("e_r", "refund.succeeded", "re_old", "pay_old", 300);
    assert_eq!(deliver(&app, &credit).await.status, 200);
    assert_eq!(deliver(&app, &refund).await.status, 200);
    to_previous_schema(&store, "pay_old", "w_old").await;
    assert_eq!(balance(&store, "w_old").await, (700, 2));

    // WHEN the refund and the credit are delivered again after their claims expired (TTL), and
    // again as attempts of the old release that posted and died before finalize
    for key in ["generic:refund:re_old", "generic:payment:pay_old"] {
        forget_claim(&store, key).await;
    }
    assert_eq!(deliver(&app, &refund).await.status, 200);
    assert_eq!(deliver(&app, &credit).await.status, 200);
    unfinished_claim(&store, "generic:refund:re_old").await;
    let resumed = deliver(&app, &refund).await;

    // THEN nothing is posted again
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert_eq!(balance(&store, "w_old").await, (700, 2));

    // WHEN the refund fails (a reversal, credited back), the reversal is stored the old way,
    // and it is delivered again after its claim expired and as an unfinished old attempt
    let reversal = refund_body("e_rf", "refund.failed", "re_old", "pay_old", 300);
    assert_eq!(deliver(&app, &reversal).await.status, 200);
    to_previous_schema(&store, "pay_old", "w_old").await;
    assert_eq!(balance(&store, "w_old").await, (1_000, 3));
    let reversal_key = payhook::domain::IdempotencyKey::new(
        ProviderId::GENERIC,
        payhook::domain::Operation::RefundReversal,
        &Reference::parse("re_old").unwrap(),
    );
    forget_claim(&store, reversal_key.as_str()).await;
    assert_eq!(deliver(&app, &reversal).await.status, 200);
    unfinished_claim(&store, reversal_key.as_str()).await;
    assert_eq!(deliver(&app, &reversal).await.status, 200);

    // THEN the reversal credited back once
    assert_eq!(balance(&store, "w_old").await, (1_000, 3));
    assert_eq!(listed(&store, "w_old").await, (1_000, 3));
}

#[tokio::test]
async fn a_movement_the_previous_release_posted_on_a_new_payment_is_found_when_resumed() {
    // GIVEN a payment paid by this release (its entries timed), then refunded by an attempt of
    // the previous release during the deploy: entry posted under the bare key, finalize lost
    let store = store("drift_overlap").await;
    let app = app(store.clone(), LEASE_MS);
    let credit = payment_body("e_c", "pay_new", "w_new", 1_000, "NGN");
    let refund = refund_body("e_r", "refund.succeeded", "re_new", "pay_new", 250);
    assert_eq!(deliver(&app, &credit).await.status, 200);
    assert_eq!(deliver(&app, &refund).await.status, 200);
    bare_entries(&store, "w_new", |key| key.contains(":refund:")).await;
    unfinished_claim(&store, "generic:refund:re_new").await;

    // WHEN this release resumes the refund (the provider's retry takes over the claim)
    let resumed = deliver(&app, &refund).await;

    // THEN it finds the old entry and posts nothing
    assert_eq!(
        (resumed.status, resumed.json()["status"].clone()),
        (200, json!("applied"))
    );
    assert_eq!(balance(&store, "w_new").await, (750, 2));
}

fn expected(reference: &str, acct: &str, amount: i64) -> ExpectedPayment {
    ExpectedPayment {
        provider: ProviderId::GENERIC,
        reference: Reference::parse(reference).unwrap(),
        account: AccountId::parse(acct).unwrap(),
        money: Money::new(amount, ngn()).unwrap(),
    }
}

#[tokio::test]
async fn registration_gives_an_account_less_processing_payment_its_account_once() {
    // GIVEN a payment first heard of by an account-less `payment.processing`, whose account-less
    // success was acknowledged unassigned
    let store = store("drift_processing").await;
    let app = app(store.clone(), LEASE_MS);
    let processing = event_body(
        "e_p",
        "payment.processing",
        json!({"reference": "pay_p", "amount": 5_000, "currency": "NGN"}),
    );
    assert_eq!(deliver(&app, &processing).await.status, 200);
    let success = event_body(
        "e_s",
        "payment.succeeded",
        json!({"reference": "pay_p", "amount": 5_000, "currency": "NGN"}),
    );
    let first = deliver(&app, &success).await;
    assert_eq!(
        (first.status, first.json()["status"].clone()),
        (200, json!("unassigned"))
    );

    // WHEN the merchant registers it, twice, and with another account
    let assigned = store
        .register(&expected("pay_p", "w_p", 5_000))
        .await
        .unwrap();
    let again = store
        .register(&expected("pay_p", "w_p", 5_000))
        .await
        .unwrap();
    let other = store
        .register(&expected("pay_p", "w_other", 5_000))
        .await
        .unwrap();

    // THEN the first fills the account, the second finds it, the third is a mismatch
    let RegisterOutcome::Assigned(p) = assigned else {
        panic!("{assigned:?}")
    };
    assert_eq!(p.account.as_ref().map(AccountId::as_str), Some("w_p"));
    assert!(matches!(again, RegisterOutcome::Exists(_)), "{again:?}");
    assert!(matches!(other, RegisterOutcome::Mismatch(..)), "{other:?}");

    // AND the success, delivered again, credits the registered account once
    assert_eq!(deliver(&app, &success).await.status, 200);
    assert_eq!(deliver(&app, &success).await.status, 200);
    assert_eq!(balance(&store, "w_p").await, (5_000, 1));
    assert_eq!(balance(&store, "w_other").await, (0, 0));
}

#[tokio::test]
async fn an_account_less_success_after_an_account_less_failure_is_unassigned_then_credited() {
    // GIVEN a payment first heard of by an account-less `payment.failed`
    let store = store("drift_failed").await;
    let app = app(store.clone(), LEASE_MS);
    let failed = event_body("e_f", "payment.failed", json!({"reference": "pay_f"}));
    assert_eq!(deliver(&app, &failed).await.status, 200);

    // WHEN its account-less success arrives
    let success = event_body(
        "e_s",
        "payment.succeeded",
        json!({"reference": "pay_f", "amount": 7_000, "currency": "NGN"}),
    );
    let answer = deliver(&app, &success).await;

    // THEN it is acknowledged unassigned (the documented answer), not 409 forever
    assert_eq!(
        (answer.status, answer.json()["status"].clone()),
        (200, json!("unassigned")),
        "{}",
        answer.body
    );
    assert_eq!(balance(&store, "w_f").await, (0, 0));

    // WHEN it is registered and the success is redelivered
    let assigned = store
        .register(&expected("pay_f", "w_f", 7_000))
        .await
        .unwrap();
    assert!(
        matches!(assigned, RegisterOutcome::Assigned(_)),
        "{assigned:?}"
    );
    let credited = deliver(&app, &success).await;

    // THEN the provider's success recovers it from FAILED onto the registered account, once
    assert_eq!(
        credited.json()["status"],
        json!("applied"),
        "{}",
        credited.body
    );
    assert_eq!(deliver(&app, &success).await.status, 200);
    assert_eq!(balance(&store, "w_f").await, (7_000, 1));
    let p = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_f").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.status.as_str(), "PAID");
}
