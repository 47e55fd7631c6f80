//! The deliveries the console tests look at, made by real signed webhooks: two payments (one
//! delivered twice), a refund that arrived before its payment (parked), and a forged delivery
//! (refused, never logged). The refund was parked as the release before parked debits were
//! written down on their payment parked it (nothing on the payment), so its payment's credit
//! does not take it and it waits for a replay.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use serde_json::json;

use super::{event_body, payment_body, send, signed, signed_with};

pub const ACCOUNT: &str = "wallet_console";

/// What the seed delivered.
pub struct Seeded {
    /// The parked refund's reference, and the payment it refunds.
    pub refund: &'static str,
    pub refunded_payment: &'static str,
}

pub async fn seed(app: &Arc<App<DynamoStore>>) -> Seeded {
    let pay1 = payment_body("evt_console_1", "pay_console_1", ACCOUNT, 10_000, "NGN");
    assert_eq!(send(app, signed(&pay1)).await.status, 200);
    let dup = send(app, signed(&pay1)).await;
    assert!(dup.replayed);
    let refund = event_body(
        "evt_console_r2",
        "refund.succeeded",
        json!({"reference": "rf_console_2", "payment_reference": "pay_console_2", "amount": 5_000, "currency": "NGN"}),
    );
    assert_eq!(send(app, signed(&refund)).await.status, 409, "parked");
    super::as_parked_by_previous_release(app.pipeline.store(), "generic", "pay_console_2").await;
    let pay2 = payment_body("evt_console_2", "pay_console_2", ACCOUNT, 7_000, "NGN");
    assert_eq!(send(app, signed(&pay2)).await.status, 200);
    // Signed with a secret the app does not hold (it holds SECRET and OTHER_SECRET): 401.
    let forged = payment_body("evt_console_x", "pay_console_x", ACCOUNT, 99_999, "NGN");
    let other = "whsec_bm90LXRoZS1jb25zb2xlLXRlc3Qtc2VjcmV0";
    assert_eq!(
        send(app, signed_with(&forged, other, super::now_s()))
            .await
            .status,
        401
    );
    Seeded {
        refund: "rf_console_2",
        refunded_payment: "pay_console_2",
    }
}

/// A payout opened (not yet reserved) for 3.00 NGN of `wallet_p` under the caller `local`'s
/// request key `key`; its id.
pub async fn open_payout(store: &DynamoStore, key: &str) -> String {
    use payhook::payouts::Payouts;
    let supports = |_| true;
    let request = payhook::payouts::PayoutRequest::parse(
        br#"{"provider":"generic","account":"wallet_p","amount":300,"currency":"NGN","destination":{"bank":"058"}}"#,
        payhook::payouts::Limits {
            max_amount_minor: 1_000_000,
            supports: &supports,
        },
    )
    .unwrap();
    let id = payhook::payouts::PayoutId::derive(
        "caller:local",
        &payhook::payouts::RequestKey::parse(key).unwrap(),
    );
    store
        .open_payout(payhook::payouts::NewPayout {
            payout: &id,
            request: &request,
            shard: 0,
        })
        .await
        .unwrap();
    id.as_str().to_owned()
}
