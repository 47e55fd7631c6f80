//! A refund's claim held on its payment (#44): what a new refund and its duplicate cost, and
//! every guarantee the claims table gave kept on the payment: a fault at any of the four
//! writes, a zombie behind its successor, reconciliation finishing one left APPLYING, a payment
//! busy with another claim, and the console's needs-attention reading both places.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::faults::{invoke, Fault, FaultInjector, Invocation, ALL_FAULTS};
use common::held::{self, balance, payment_item, refund_facts, until_settled};
use common::*;
use payhook::domain::{IdempotencyKey, ProviderId, Reference};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::DynamoStore;
use payhook::idempotency::{Claims, FinalizeOutcome, OwnerToken, StoredResponse};
use payhook::payments::{HeldMove, Hosted, NewHostClaim, Payments};

const LEASE_MS: i64 = 150;

fn refund_key(refund: &str) -> IdempotencyKey {
    IdempotencyKey::from_stored(format!("generic:refund:{refund}"))
}

/// The state of `refund`'s claim on its payment, if it has one there.
async fn held_state(store: &DynamoStore, payment: &str, refund: &str) -> Option<String> {
    held::held_state(store, payment, refund_key(refund).as_str()).await
}

/// Claims-table items under `refund`'s key.
async fn claims_table_holds(store: &DynamoStore, refund: &str) -> bool {
    held::claims_table_holds(store, refund_key(refund).as_str()).await
}

#[tokio::test]
async fn a_new_refund_costs_four_writes_and_its_duplicate_replays_at_two_writes_and_a_read() {
    // GIVEN two payments credited (the process's layout read is behind us)
    let base = store("rfcost").await;
    let counter = RequestCounter::new();
    let app = app(
        store_with(&base, sdk_builder().interceptor(counter.clone())),
        30_000,
    );
    for p in ["pay_full", "pay_part"] {
        let r = send(
            &app,
            signed(&payment_body(&format!("e_{p}"), p, "w_rc", 10_000, "NGN")),
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
    }

    // WHEN one is refunded in full
    counter.reset();
    let full = send(
        &app,
        signed(&refund_body("e_rf1", "rf_full", "pay_full", 10_000)),
    )
    .await;

    // THEN the refund took 4 writes (the refund with its claim, the ledger entry, the claim
    // DONE, the log) and no read; it was 5 writes when the claims table held it
    assert_eq!((full.status, full.replayed), (200, false), "{full:?}");
    assert_eq!(full.json()["status"], "applied");
    let calls = |c: &RequestCounter| (c.get("UpdateItem"), c.get("GetItem"), c.get("PutItem"));
    assert_eq!(calls(&counter), (2, 0, 2), "{:?}", counter.snapshot());
    assert_eq!(counter.writes(), 4);
    assert_eq!(
        held_state(&base, "pay_full", "rf_full").await.as_deref(),
        Some("DONE")
    );
    assert!(
        !claims_table_holds(&base, "rf_full").await,
        "no claims-table write"
    );
    assert!(!payment_item(&base, "pay_full").await.contains_key("open"));

    // AND its duplicate (another event id) replays the stored bytes: the failed refund write,
    // dynalite's read for want of ALL_OLD, and its log entry
    counter.reset();
    let dup = send(
        &app,
        signed(&refund_body("e_rf1b", "rf_full", "pay_full", 10_000)),
    )
    .await;
    assert!(dup.replayed, "{dup:?}");
    assert_eq!(dup.body, full.body);
    assert_eq!(calls(&counter), (1, 1, 1), "{:?}", counter.snapshot());

    // AND a partial refund's first write aims at a full one and is re-aimed from what it saw:
    // one failed write and dynalite's read more, still no claims-table write
    counter.reset();
    let part = send(
        &app,
        signed(&refund_body("e_rf2", "rf_part", "pay_part", 3_000)),
    )
    .await;
    assert_eq!((part.status, part.replayed), (200, false), "{part:?}");
    assert_eq!(calls(&counter), (3, 1, 2), "{:?}", counter.snapshot());
    assert!(!claims_table_holds(&base, "rf_part").await);

    // AND the money moved once each
    assert_eq!(balance(&base, "w_rc").await, (20_000 - 10_000 - 3_000, 4));
}

#[tokio::test]
async fn a_fault_at_any_of_a_refunds_writes_is_finished_by_the_retry_and_never_applied_twice() {
    let base = store("rffault").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(store.clone(), LEASE_MS);
    for step in 0..4 {
        for fault in ALL_FAULTS {
            // GIVEN a credited payment, and its refund's invocation meeting `fault` at call `step`
            // (the refund with its claim, the ledger entry, the claim DONE, the log)
            let r = format!("p{step}_{fault:?}");
            let acct = format!("w_{r}");
            let paid = send(
                &app,
                signed(&payment_body(&format!("e_{r}"), &r, &acct, 900, "NGN")),
            )
            .await;
            assert_eq!(paid.status, 200, "{paid:?}");
            let refund = format!("rf_{r}");
            let body = refund_body(&format!("e_{refund}"), &refund, &r, 900);
            let inv = Invocation::new(Some((step, fault)));
            let first = invoke(inv.clone(), send(&app, signed(&body))).await;
            assert!(inv.fired(), "{r}: the fault never fired");
            assert!(
                first.status == 503 || first.status == 200,
                "{r}: {} {}",
                first.status,
                first.body
            );

            // WHEN the provider retries until it hears a final answer
            let last = until_settled(&app, &body).await;

            // THEN the refund debited once, its claim on the payment is DONE, the payment is
            // off the POSTING index, and the claims table was never written for it
            assert_eq!(last.status, 200, "{r}: {}", last.body);
            assert_eq!(last.json()["status"], "applied", "{r}");
            assert_eq!(balance(&store, &acct).await, (0, 2), "{r}");
            assert_eq!(
                held_state(&store, &r, &refund).await.as_deref(),
                Some("DONE"),
                "{r}"
            );
            assert!(!payment_item(&store, &r).await.contains_key("open"), "{r}");
            assert!(!claims_table_holds(&store, &refund).await, "{r}");
            let again = send(&app, signed(&body)).await;
            assert_eq!(
                (again.replayed, again.body.as_str()),
                (true, last.body.as_str()),
                "{r}"
            );
        }
    }
}

#[tokio::test]
async fn a_refund_zombie_cannot_overwrite_or_take_back_its_successors_claim() {
    // GIVEN a credited payment whose refund A applied with its claim (a short lease) and stalled
    let store = store("rfzombie").await;
    let app = app(store.clone(), 30_000);
    let paid = send(
        &app,
        signed(&payment_body("e_z", "pay_z", "w_z", 900, "NGN")),
    )
    .await;
    assert_eq!(paid.status, 200);
    let (facts, fp) = refund_facts("rf_z", "pay_z", 900);
    let key = refund_key("rf_z");
    let a = OwnerToken::generate();
    let claim = NewHostClaim {
        token: &a,
        lease_ms: 50,
        fingerprint: &fp,
    };
    let won = store
        .hold(ProviderId::GENERIC, HeldMove::Refund(&facts), &key, claim)
        .await
        .unwrap();
    assert!(matches!(won, Hosted::Taken(_)), "A must win: {won:?}");
    tokio::time::sleep(Duration::from_millis(80)).await;

    // WHEN B (the provider's redelivery) takes the expired claim over and finishes
    let body = refund_body("e_rz", "rf_z", "pay_z", 900);
    let b = send(&app, signed(&body)).await;
    assert_eq!((b.status, b.replayed), (200, false), "{}", b.body);

    // AND A wakes and tries to finalize with its own answer, then to take the claim back
    let zombie = StoredResponse {
        status: 200,
        body: "{\"zombie\":true}".into(),
    };
    let reference = &facts.payment_reference;
    let outcome = store
        .finalize_held(ProviderId::GENERIC, reference, &key, &a, &zombie)
        .await
        .unwrap();
    let took = store
        .take_over_held(ProviderId::GENERIC, reference, &key, &a, &a, 50)
        .await
        .unwrap();

    // THEN A's writes are refused, B's answer is the stored one, the money moved once
    assert_eq!(
        outcome,
        FinalizeOutcome::Superseded(Some(StoredResponse {
            status: 200,
            body: b.body.clone()
        }))
    );
    assert!(!took, "a zombie must not take its successor's claim");
    let again = send(&app, signed(&body)).await;
    assert_eq!(
        (again.replayed, again.body.as_str()),
        (true, b.body.as_str())
    );
    assert_eq!(balance(&store, "w_z").await, (0, 2));
}

#[tokio::test]
async fn reconciliation_finishes_a_refund_left_applying_on_its_payment() {
    // GIVEN a credited payment whose full refund's invocation died right after its first
    // write (the refund applied, its claim APPLYING on the payment, no ledger entry)
    let base = store("rfresume").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(store.clone(), LEASE_MS);
    let paid = send(
        &app,
        signed(&payment_body("e_p", "pay_r", "w_r", 500, "NGN")),
    )
    .await;
    assert_eq!(paid.status, 200);
    let body = refund_body("e_r", "rf_r", "pay_r", 500);
    let died = invoke(
        Invocation::new(Some((0, Fault::CrashAfter))),
        send(&app, signed(&body)),
    )
    .await;
    assert_eq!(died.status, 503);
    assert_eq!(
        held_state(&store, "pay_r", "rf_r").await.as_deref(),
        Some("APPLYING")
    );
    assert_eq!(balance(&store, "w_r").await, (500, 1));
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 50)).await;

    // WHEN the provider gave up and one reconciliation pass runs
    let report = held::reconcile_once(&store, LEASE_MS).await;

    // THEN the refund is debited once, its claim DONE, the payment off the POSTING index, and
    // the resume is logged as a refund's
    assert_eq!(balance(&store, "w_r").await, (0, 2), "{report:?}");
    assert_eq!(
        held_state(&store, "pay_r", "rf_r").await.as_deref(),
        Some("DONE")
    );
    assert!(!payment_item(&store, "pay_r").await.contains_key("open"));
    let resumed: Vec<_> = report
        .completed
        .iter()
        .filter(|f| f.kind == "stuck_claim")
        .collect();
    assert_eq!(resumed.len(), 1, "{report:?}");
    let events = scan(&store, &store.tables().events.clone()).await;
    assert!(
        events
            .iter()
            .any(|e| e.get("event_type").and_then(|v| v.as_s().ok())
                == Some(&payhook::pipeline::RESUME_REFUND_EVENT_TYPE.to_owned())),
        "the resume is logged as a refund's"
    );
    // AND the provider's late redelivery replays the resumed answer
    let late = send(&app, signed(&body)).await;
    assert!(late.replayed, "{late:?}");
}

#[tokio::test]
async fn a_refund_while_its_payment_holds_a_credit_claim_goes_through_the_claims_table() {
    // GIVEN a payment paid by an invocation that stalled before its credit's ledger entry (its
    // claim APPLYING on the payment, holding the POSTING entry)
    let base = store("rfbusy").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(store.clone(), LEASE_MS);
    let credit = payment_body("e_c", "pay_b", "w_b", 1_000, "NGN");
    let died = invoke(
        Invocation::new(Some((1, Fault::CrashAfter))),
        send(&app, signed(&credit)),
    )
    .await;
    assert_eq!(died.status, 503);
    assert!(payment_item(&store, "pay_b").await.contains_key("open"));

    // WHEN its refund arrives meanwhile, then the credit is redelivered past its lease
    let body = refund_body("e_rb", "rf_b", "pay_b", 400);
    let refund = send(&app, signed(&body)).await;
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 50)).await;
    let credited = until_settled(&app, &credit).await;

    // THEN the refund applied through the claims table (DONE there, nothing held on the
    // payment), the credit finished on its payment, each moved once
    assert_eq!(
        (refund.status, refund.json()["status"].as_str()),
        (200, Some("applied")),
        "{refund:?}"
    );
    assert_eq!(credited.status, 200, "{credited:?}");
    assert!(claims_table_holds(&store, "rf_b").await);
    assert_eq!(held_state(&store, "pay_b", "rf_b").await, None);
    assert_eq!(balance(&store, "w_b").await, (600, 2));
    // AND its duplicate replays the claims table's answer (the refund write fails on its key,
    // finds no claim on the payment, and the claims table decides)
    let dup = send(&app, signed(&refund_body("e_rb2", "rf_b", "pay_b", 400))).await;
    assert!(dup.replayed, "{dup:?}");
    assert_eq!(dup.body, refund.body);
    assert_eq!(balance(&store, "w_b").await, (600, 2));
}

#[tokio::test]
async fn needs_attention_counts_a_refund_done_on_its_payment_as_settled() {
    // GIVEN a refund applied with its claim on its payment, one through the claims table, and
    // a refund never applied
    let store = store("rfdone").await;
    let app = app(store.clone(), 30_000);
    for p in ["pay_d", "pay_e"] {
        let r = send(
            &app,
            signed(&payment_body(&format!("e_{p}"), p, "w_d", 1_000, "NGN")),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let r = send(&app, signed(&refund_body("e_rd", "rf_d", "pay_d", 100))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        held_state(&store, "pay_d", "rf_d").await.as_deref(),
        Some("DONE")
    );
    let pay = |p: &str| Some(Reference::parse(p).unwrap());

    // WHEN the console asks which of their keys are done, with the payment each delivery named
    let asked = vec![
        (refund_key("rf_d"), pay("pay_d")),
        (refund_key("rf_never"), pay("pay_e")),
        (
            IdempotencyKey::from_stored("generic:payment:pay_e".into()),
            pay("pay_e"),
        ),
    ];
    let done = store.done_among(&asked).await.unwrap();

    // THEN the refund held on its payment and the credit are done; the one never applied is not
    assert!(done.contains(&refund_key("rf_d")), "{done:?}");
    assert!(done.contains(&asked[2].0), "{done:?}");
    assert!(!done.contains(&refund_key("rf_never")), "{done:?}");
    // AND without its payment a refund's key is not known done (never guessed)
    let blind = store
        .done_among(&[(refund_key("rf_d"), None)])
        .await
        .unwrap();
    assert!(blind.is_empty(), "{blind:?}");
}
