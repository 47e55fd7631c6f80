//! What the tests of claims held on a payment item (#44) read: the payment as stored, a held
//! claim's state, whether the claims table holds a key, an NGN balance, and a provider that
//! retries until it hears a final answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use payhook::domain::{
    AccountId, ClaimedFacts, Currency, EventKind, Money, Reference, RefundFacts,
};
use payhook::dynamodb::DynamoStore;
use payhook::ledger::Ledger;

use super::{scan, send, signed, Resp};

pub fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

/// `acct`'s NGN balance and its number of entries.
pub async fn balance(store: &DynamoStore, acct: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (b.balances.get(&ngn()).copied().unwrap_or(0), b.entries)
}

/// The generic payment item `payment` as stored.
pub async fn payment_item(store: &DynamoStore, payment: &str) -> HashMap<String, AttributeValue> {
    let table = store.tables().payments.clone();
    scan(store, &table)
        .await
        .into_iter()
        .find(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&format!("generic#{payment}")))
        .expect("the payment item")
}

/// The state of the claim held on `payment` under `key` (`st` of `rc#{key}`), if there is one.
pub async fn held_state(store: &DynamoStore, payment: &str, key: &str) -> Option<String> {
    let item = payment_item(store, payment).await;
    item.get(&format!("rc#{key}"))
        .and_then(|v| v.as_m().ok())
        .and_then(|m| m.get("st"))
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// Whether the claims table holds an item under `key`.
pub async fn claims_table_holds(store: &DynamoStore, key: &str) -> bool {
    let table = store.tables().idempotency.clone();
    scan(store, &table)
        .await
        .iter()
        .any(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&key.to_owned()))
}

/// Delivers like a provider: retries 409 and 5xx with a short backoff until a final answer.
pub async fn until_settled(app: &Arc<payhook::http::App<DynamoStore>>, body: &str) -> Resp {
    for _ in 0..100 {
        let r = send(app, signed(body)).await;
        if r.status != 409 && r.status < 500 {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    panic!("never settled");
}

/// The refund `refund` (whole `amount`) of `payment`, as facts and their fingerprint.
pub fn refund_facts(
    refund: &str,
    payment: &str,
    amount: i64,
) -> (RefundFacts, payhook::domain::Fingerprint) {
    let facts = RefundFacts {
        refund_reference: Reference::parse(refund).unwrap(),
        payment_reference: Reference::parse(payment).unwrap(),
        money: Money::new(amount, ngn()).unwrap(),
    };
    let fp = ClaimedFacts::of(&EventKind::RefundSucceeded(facts.clone()))
        .unwrap()
        .fingerprint();
    (facts, fp)
}

/// One reconciliation pass over `store`, as the scheduled one runs (no provider API), after
/// the provider gave up: every stuck claim is due.
pub async fn reconcile_once(store: &DynamoStore, lease_ms: i64) -> payhook::reconcile::Report {
    let (providers, _) = super::config(lease_ms).providers();
    let pipeline = payhook::pipeline::Pipeline::new(store.clone());
    let api = payhook::reconcile::HttpProviderApi::new(Vec::new()).unwrap();
    let settings = payhook::reconcile::ReconcileSettings {
        pending_after_ms: 0,
        lease_ms: 5_000,
        ..payhook::reconcile::ReconcileSettings::default()
    };
    payhook::reconcile::Reconciler {
        pipeline: &pipeline,
        providers: &providers,
        api: &api,
        settings,
    }
    .run()
    .await
    .unwrap()
}
