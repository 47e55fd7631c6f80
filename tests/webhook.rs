//! The core contract end to end through the real router, against dynalite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use payhook::domain::{AccountId, Currency};
use payhook::ledger::Ledger;

#[tokio::test]
async fn first_delivery_applies_and_duplicate_replays_byte_identical() {
    // GIVEN a fresh store and the contract's sample payment
    let store = store("dup").await;
    let app = app(store.clone(), 30_000);
    let body = payment_body("evt_1", "pay_1", "wallet_42", 125_000, "NGN");

    // WHEN it is delivered, then delivered again (another event id, same money movement)
    let first = send(&app, signed(&body)).await;
    let again = send(&app, signed(&payment_body("evt_2", "pay_1", "wallet_42", 125_000, "NGN"))).await;

    // THEN the first applies, the duplicate replays the same bytes, and one credit exists
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(!first.replayed);
    assert_eq!(first.json()["status"], "applied");
    assert_eq!(first.json()["key"], "generic:payment:pay_1");
    assert_eq!(first.json()["amount"], 125_000);
    assert_eq!(again.status, 200);
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    let balance = store.balance(&AccountId::parse("wallet_42").unwrap()).await.unwrap();
    assert_eq!(balance.balances.get(&Currency::parse("NGN").unwrap()), Some(&125_000));
    assert_eq!(balance.entries, 1);
}
