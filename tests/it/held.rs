//! A dispute movement's and a reversal's claim held on their payment (#44), as a refund's is
//! (`refunds.rs`, whose zombie test covers the takeover and finalize these share): what a new
//! movement and its duplicate cost, a fault at any of the four writes, reconciliation finishing
//! one left APPLYING, and the console's needs-attention reading the payment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::faults::{invoke, Fault, FaultInjector, Invocation, ALL_FAULTS};
use common::held::{
    self, balance, claims_table_holds, held_state, payment_item, refund_facts, until_settled,
};
use common::item_size;
use common::*;
use payhook::domain::{IdempotencyKey, ProviderId, Reference};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::DynamoStore;
use payhook::idempotency::{ClaimState, Claims, FinalizeOutcome, OwnerToken, StoredResponse};
use payhook::payments::{HeldMove, Hosted, NewHostClaim, Payments, RefundOutcome};

const LEASE_MS: i64 = 150;

/// A generic dispute movement (`dispute.funds_withdrawn` / `dispute.funds_reinstated`).
fn dispute_body(kind: &str, event_id: &str, dispute: &str, payment: &str, amount: i64) -> String {
    let data = serde_json::json!({"dispute": dispute, "reference": payment, "amount": amount,
        "currency": "NGN"});
    event_body(event_id, kind, data)
}

fn withdrawal(event_id: &str, dispute: &str, payment: &str, amount: i64) -> String {
    dispute_body(
        "dispute.funds_withdrawn",
        event_id,
        dispute,
        payment,
        amount,
    )
}

fn reinstatement(event_id: &str, dispute: &str, payment: &str, amount: i64) -> String {
    dispute_body(
        "dispute.funds_reinstated",
        event_id,
        dispute,
        payment,
        amount,
    )
}

/// A generic `refund.failed`: the provider says `refund` failed (after or before it applied).
fn reversal(event_id: &str, refund: &str, payment: &str, amount: i64) -> String {
    let data = serde_json::json!({"reference": refund, "payment_reference": payment,
        "amount": amount, "currency": "NGN"});
    event_body(event_id, "refund.failed", data)
}

fn withdrawal_key(dispute: &str) -> String {
    format!("generic:dispute_withdrawal:{dispute}")
}

fn reinstatement_key(dispute: &str) -> String {
    format!("generic:dispute_reinstatement:{dispute}")
}

fn reversal_key(refund: &str) -> String {
    format!("generic:refund_reversal:{refund}")
}

async fn pay(app: &std::sync::Arc<payhook::http::App<DynamoStore>>, p: &str, acct: &str, n: i64) {
    let r = send(
        app,
        signed(&payment_body(&format!("e_{p}"), p, acct, n, "NGN")),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn a_dispute_movement_and_a_reversal_cost_four_writes_and_their_duplicates_two_and_a_read() {
    // GIVEN three credited payments, one refunded in full (the process's layout read is
    // behind us)
    let base = store("hdcost").await;
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    let app = app(counted.clone(), 30_000);
    for p in ["pay_dp", "pay_rv", "pay_vd"] {
        pay(&app, p, "w_hd", 10_000).await;
    }
    let r = send(&app, signed(&refund_body("e_r", "rf_rv", "pay_rv", 10_000))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let calls = |c: &RequestCounter| (c.get("UpdateItem"), c.get("GetItem"), c.get("PutItem"));
    let cases = [
        // (what, body, another delivery of it, its key, its payment, calls new, calls dup)
        (
            "withdrawal",
            withdrawal("e_w", "dsp_1", "pay_dp", 4_000),
            withdrawal("e_w2", "dsp_1", "pay_dp", 4_000),
            withdrawal_key("dsp_1"),
            "pay_dp",
            (2, 0, 2),
        ),
        (
            "reinstatement",
            reinstatement("e_i", "dsp_1", "pay_dp", 4_000),
            reinstatement("e_i2", "dsp_1", "pay_dp", 4_000),
            reinstatement_key("dsp_1"),
            "pay_dp",
            (2, 0, 2),
        ),
        (
            "reversal",
            reversal("e_v", "rf_rv", "pay_rv", 10_000),
            reversal("e_v2", "rf_rv", "pay_rv", 10_000),
            reversal_key("rf_rv"),
            "pay_rv",
            (2, 0, 2),
        ),
    ];
    for (what, body, other, key, payment, new_calls) in cases {
        // WHEN the movement arrives
        counter.reset();
        let first = send(&app, signed(&body)).await;

        // THEN it took its write with its claim, the ledger entry, the claim DONE and the log,
        // and the claims table was not written (it was 5 writes when it held the claim); a
        // withdrawal also reads the balance, to say so when it took it below zero
        assert_eq!(
            (first.status, first.replayed),
            (200, false),
            "{what}: {first:?}"
        );
        let mut seen = counter.snapshot();
        if what == "withdrawal" {
            counter.reset();
            held::balance(&counted, "w_hd").await;
            for (op, n) in counter.snapshot() {
                let left = seen.get(&op).copied().unwrap_or(0).checked_sub(n);
                seen.insert(op, left.expect("no fewer calls than the balance read"));
            }
        }
        let get = |op: &str| seen.get(op).copied().unwrap_or(0);
        let seen_calls = (get("UpdateItem"), get("GetItem"), get("PutItem"));
        assert_eq!(seen_calls, new_calls, "{what}: {seen:?}");
        assert_eq!(get("Query"), 0, "{what}: {seen:?}");
        assert_eq!(
            held_state(&base, payment, &key).await.as_deref(),
            Some("DONE"),
            "{what}"
        );
        assert!(!claims_table_holds(&base, &key).await, "{what}");
        assert!(
            !payment_item(&base, payment).await.contains_key("open"),
            "{what}"
        );

        // AND each duplicate replays the stored bytes: the failed write, dynalite's read for
        // want of ALL_OLD, and its log entry
        for again in [body.clone(), other] {
            counter.reset();
            let dup = send(&app, signed(&again)).await;
            assert!(dup.replayed, "{what}: {dup:?}");
            assert_eq!(dup.body, first.body, "{what}");
            assert_eq!(
                calls(&counter),
                (1, 1, 1),
                "{what}: {:?}",
                counter.snapshot()
            );
        }
    }

    // AND a refund never applied is voided through the claims table (a void may meet a payment
    // not paid yet, whose credit's write would take over its `open` entry): the first write
    // aims at giving it back, fails and is judged from dynalite's read, then the claims table's
    // path (its claim, the same failed aim and read, the void, its finalize, the log)
    counter.reset();
    let void = send(&app, signed(&reversal("e_x", "rf_never", "pay_vd", 500))).await;
    assert_eq!(
        (void.status, void.json()["status"].as_str()),
        (200, Some("voided")),
        "{void:?}"
    );
    assert_eq!(calls(&counter), (4, 2, 2), "void: {:?}", counter.snapshot());
    assert!(claims_table_holds(&base, &reversal_key("rf_never")).await);
    assert_eq!(
        held_state(&base, "pay_vd", &reversal_key("rf_never")).await,
        None
    );
    let dup = send(&app, signed(&reversal("e_x2", "rf_never", "pay_vd", 500))).await;
    assert_eq!(
        (dup.replayed, dup.body.as_str()),
        (true, void.body.as_str())
    );

    // AND the money moved once each: three credits, the refund, the withdrawal and its
    // reinstatement, the reversal; the void moved nothing
    let credits = 3 * 10_000;
    assert_eq!(
        balance(&base, "w_hd").await,
        (credits - 10_000 - 4_000 + 4_000 + 10_000, 7)
    );
    // AND a refund voided before it arrived never applies
    let late = send(
        &app,
        signed(&refund_body("e_late", "rf_never", "pay_vd", 500)),
    )
    .await;
    assert_eq!(late.status, 200, "{late:?}");
    assert_eq!(balance(&base, "w_hd").await.0, credits);
}

#[tokio::test]
async fn a_fault_at_any_of_a_withdrawals_or_a_reversals_writes_is_finished_by_the_retry_once() {
    let base = store("hdfault").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(store.clone(), LEASE_MS);
    for step in 0..4 {
        for fault in ALL_FAULTS {
            // GIVEN a credited payment with a refund applied, and a withdrawal and the refund's
            // reversal each meeting `fault` at call `step` (its write with its claim, the
            // ledger entry, the claim DONE, the log)
            let r = format!("p{step}_{fault:?}");
            let acct = format!("w_{r}");
            pay(&app, &r, &acct, 900).await;
            let refund = format!("rf_{r}");
            let refunded = send(
                &app,
                signed(&refund_body(&format!("e_{refund}"), &refund, &r, 300)),
            )
            .await;
            assert_eq!(refunded.status, 200, "{refunded:?}");
            let dispute = format!("dsp_{r}");
            let movements = [
                (
                    withdrawal(&format!("e_{dispute}"), &dispute, &r, 200),
                    withdrawal_key(&dispute),
                ),
                (
                    reversal(&format!("e_v_{refund}"), &refund, &r, 300),
                    reversal_key(&refund),
                ),
            ];
            for (body, key) in movements {
                let inv = Invocation::new(Some((step, fault)));
                let first = invoke(inv.clone(), send(&app, signed(&body))).await;
                assert!(inv.fired(), "{r} {key}: the fault never fired");
                assert!(
                    first.status == 503 || first.status == 200,
                    "{r} {key}: {} {}",
                    first.status,
                    first.body
                );

                // WHEN the provider retries until it hears a final answer
                let last = until_settled(&app, &body).await;

                // THEN it applied, its claim on the payment is DONE, the payment is off the
                // POSTING index, the claims table was never written, and a duplicate replays
                assert_eq!(last.status, 200, "{r} {key}: {}", last.body);
                assert_eq!(last.json()["status"], "applied", "{r} {key}");
                assert_eq!(
                    held_state(&store, &r, &key).await.as_deref(),
                    Some("DONE"),
                    "{r} {key}"
                );
                assert!(
                    !payment_item(&store, &r).await.contains_key("open"),
                    "{r} {key}"
                );
                assert!(!claims_table_holds(&store, &key).await, "{r} {key}");
                let again = send(&app, signed(&body)).await;
                assert_eq!(
                    (again.replayed, again.body.as_str()),
                    (true, last.body.as_str()),
                    "{r} {key}"
                );
            }
            // AND the money moved once each: 900 - 300 - 200 + 300
            assert_eq!(balance(&store, &acct).await, (700, 4), "{r}");
        }
    }
}

#[tokio::test]
async fn reconciliation_finishes_a_withdrawal_left_applying_on_its_payment() {
    // GIVEN a credited payment whose withdrawal's invocation died right after its first write
    // (the withdrawal recorded, its claim APPLYING on the payment, no ledger entry)
    let base = store("hdresume").await;
    let store = store_with(&base, sdk_builder().interceptor(FaultInjector));
    let app = app(store.clone(), LEASE_MS);
    pay(&app, "pay_r", "w_r", 500).await;
    let body = withdrawal("e_w", "dsp_r", "pay_r", 500);
    let died = invoke(
        Invocation::new(Some((0, Fault::CrashAfter))),
        send(&app, signed(&body)),
    )
    .await;
    assert_eq!(died.status, 503);
    let key = withdrawal_key("dsp_r");
    assert_eq!(
        held_state(&store, "pay_r", &key).await.as_deref(),
        Some("APPLYING")
    );
    assert_eq!(balance(&store, "w_r").await, (500, 1));
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 50)).await;

    // WHEN the provider gave up and one reconciliation pass runs
    let report = held::reconcile_once(&store, LEASE_MS).await;

    // THEN the withdrawal is debited once, its claim DONE, the payment off the POSTING index,
    // and the resume is logged as a held movement's
    assert_eq!(balance(&store, "w_r").await, (0, 2), "{report:?}");
    assert_eq!(
        held_state(&store, "pay_r", &key).await.as_deref(),
        Some("DONE")
    );
    assert!(!payment_item(&store, "pay_r").await.contains_key("open"));
    let resumed = report.completed.iter().filter(|f| f.kind == "stuck_claim");
    assert_eq!(resumed.count(), 1, "{report:?}");
    let events = scan(&store, &store.tables().events.clone()).await;
    assert!(
        events
            .iter()
            .any(|e| e.get("event_type").and_then(|v| v.as_s().ok())
                == Some(&payhook::pipeline::RESUME_HELD_EVENT_TYPE.to_owned())),
        "the resume is logged as a held movement's"
    );
    // AND the provider's late redelivery replays the resumed answer
    let late = send(&app, signed(&body)).await;
    assert!(late.replayed, "{late:?}");
    assert_eq!(balance(&store, "w_r").await, (0, 2));
}

#[tokio::test]
async fn needs_attention_counts_a_dispute_movement_and_a_reversal_done_on_their_payment() {
    // GIVEN a withdrawal and a reversal applied with their claims on their payment
    let store = store("hddone").await;
    let app = app(store.clone(), 30_000);
    pay(&app, "pay_d", "w_d", 1_000).await;
    let steps = [
        refund_body("e_r", "rf_d", "pay_d", 100),
        withdrawal("e_w", "dsp_d", "pay_d", 200),
        reversal("e_v", "rf_d", "pay_d", 100),
    ];
    for body in steps {
        let r = send(&app, signed(&body)).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let pay = Some(Reference::parse("pay_d").unwrap());
    let key = |k: String| IdempotencyKey::from_stored(k);

    // WHEN the console asks which of their keys are done, with the payment each delivery named
    let asked = vec![
        (key(withdrawal_key("dsp_d")), pay.clone()),
        (key(reversal_key("rf_d")), pay.clone()),
        (key(reinstatement_key("dsp_d")), pay.clone()),
    ];
    let done = store.done_among(&asked).await.unwrap();

    // THEN both are done; the reinstatement that never came is not
    assert!(done.contains(&asked[0].0), "{done:?}");
    assert!(done.contains(&asked[1].0), "{done:?}");
    assert!(!done.contains(&asked[2].0), "{done:?}");
    assert_eq!(balance(&store, "w_d").await, (800, 4));
}

/// The generic payment item `payment`, read consistently by its key.
async fn payment_at(
    store: &DynamoStore,
    payment: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    item_at(store, &format!("generic#{payment}")).await
}

/// The payments table's item `pk`, read consistently.
async fn item_at(
    store: &DynamoStore,
    pk: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.tables().payments.clone())
        .key("pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the item")
}

/// Pads `payment` with a string attribute `pad` of `len` bytes (`3 + len` on the item).
async fn pad(store: &DynamoStore, payment: &str, len: usize) {
    pad_item(store, &format!("generic#{payment}"), len).await;
}

/// Pads the payments table's item `pk` as [`pad`] does.
async fn pad_item(store: &DynamoStore, pk: &str, len: usize) {
    store
        .client()
        .update_item()
        .table_name(store.tables().payments.clone())
        .key("pk", AttributeValue::S(pk.to_owned()))
        .update_expression("SET #pad = :p")
        .expression_attribute_names("#pad", "pad")
        .expression_attribute_values(":p", AttributeValue::S("x".repeat(len)))
        .send()
        .await
        .unwrap();
}

/// `name` and its value's size on an item.
fn attribute_bytes(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> usize {
    item.get(name)
        .map_or(0, |v| name.len() + item_size::value_bytes(v))
}

#[tokio::test]
async fn a_held_claims_answer_is_kept_at_one_under_and_at_400_kb_and_finished_without_it_over() {
    let store = store("hdlimit").await;
    let app = app(store.clone(), 30_000);
    let body = "{\"status\":\"applied\",\"answer\":\"".to_owned() + &"a".repeat(300) + "\"}";
    let answer = StoredResponse { status: 200, body };
    for over in [-1i64, 0, 1] {
        // GIVEN a credited payment whose refund's claim was taken on it (APPLYING), padded so
        // that the claim DONE with the answer makes it 400 KB + `over` bytes
        let p = format!("pay_lim{}", over + 1);
        pay(&app, &p, "w_lim", 900).await;
        let (facts, fp) = refund_facts(&format!("rf_{p}"), &p, 900);
        let key = IdempotencyKey::from_stored(format!("generic:refund:rf_{p}"));
        let token = OwnerToken::generate();
        let claim = NewHostClaim {
            token: &token,
            lease_ms: 30_000,
            fingerprint: &fp,
        };
        let held = store.hold(ProviderId::GENERIC, HeldMove::Refund(&facts), &key, claim);
        assert!(matches!(held.await.unwrap(), Hosted::Taken(_)));
        let applying = payment_at(&store, &p).await;
        let open = attribute_bytes(&applying, "open");
        // DONE is 4 bytes shorter than APPLYING; `as` (200) and `ab` join the claim's map
        // (one byte each besides name and value); `open` goes.
        let finalize_delta = 5 + (3 + answer.body.len()) - 4;
        let finished = item_size::item_bytes(&applying) + finalize_delta - open;
        let target = (item_size::MAX_ITEM_BYTES as i64 + over) as usize;
        pad(&store, &p, target - finished - 3).await;

        // WHEN the claim is finalized with its answer
        let done = store
            .finalize_held(
                ProviderId::GENERIC,
                &facts.payment_reference,
                &key,
                &token,
                &answer,
            )
            .await
            .unwrap();

        // THEN it is DONE either way; at and under the limit with the answer (the item exactly
        // that size), over it with the status alone, so a duplicate hears 200 and nothing runs
        // again
        assert_eq!(done, FinalizeOutcome::Done, "{over}");
        let item = payment_at(&store, &p).await;
        let claim = item.get(&format!("rc#{key}")).unwrap().as_m().unwrap();
        assert_eq!(claim["st"].as_s().unwrap(), "DONE", "{over}");
        assert_eq!(claim["as"].as_n().unwrap(), "200", "{over}");
        assert!(!item.contains_key("open"), "{over}");
        let record = store.payment(ProviderId::GENERIC, &facts.payment_reference);
        let state = record.await.unwrap().unwrap().held_claims[key.as_str()]
            .state
            .clone();
        if over <= 0 {
            assert_eq!(item_size::item_bytes(&item), target, "{over}");
            assert_eq!(claim["ab"].as_s().unwrap(), &answer.body, "{over}");
            assert_eq!(state, ClaimState::Done(answer.clone()), "{over}");
        } else {
            assert!(!claim.contains_key("ab"), "{over}");
            assert!(
                item_size::item_bytes(&item) < item_size::MAX_ITEM_BYTES,
                "{over}"
            );
            assert_eq!(state, ClaimState::DoneUnrecorded { status: 200 }, "{over}");
        }
    }
}

#[tokio::test]
async fn a_refund_whose_claim_does_not_fit_on_its_payment_is_claimed_in_the_claims_table() {
    // GIVEN a payment refunded the usual way (the claim on it), to size a refund's write, and a
    // payment like it padded so that a refund's write fits without its claim but not with it
    let store = store("hdlimit1").await;
    let app = app(store.clone(), 30_000);
    pay(&app, "pay_s", "w_l1", 900).await;
    pay(&app, "pay_t", "w_l2", 900).await;
    let before = item_size::item_bytes(&payment_at(&store, "pay_s").await);
    let r = send(&app, signed(&refund_body("e_s", "rf_s", "pay_s", 900))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let after = payment_at(&store, "pay_s").await;
    let claim_done = attribute_bytes(&after, "rc#generic:refund:rf_s");
    let plain = item_size::item_bytes(&after) - claim_done - before;
    // The claim while APPLYING: its DONE map without `as` and `ab`, APPLYING 4 bytes longer,
    // and `open` (`POSTING#n`, 4 + 9 bytes).
    let body_len = r.body.len();
    let claim_applying = claim_done - 5 - (3 + body_len) + 4 + 13;
    assert!(claim_applying > 100, "{claim_applying}");
    let aim = item_size::MAX_ITEM_BYTES - plain - claim_applying / 2;
    let start = item_size::item_bytes(&payment_at(&store, "pay_t").await);
    pad(&store, "pay_t", aim - start - 3).await;

    // WHEN the padded payment is refunded, and the refund comes again
    let body = refund_body("e_t", "rf_t", "pay_t", 900);
    let first = send(&app, signed(&body)).await;
    let again = send(&app, signed(&refund_body("e_t2", "rf_t", "pay_t", 900))).await;

    // THEN it applied once through the claims table (no claim on the payment), and its
    // duplicate replays the claims table's answer
    assert_eq!((first.status, first.replayed), (200, false), "{first:?}");
    assert_eq!(first.json()["status"], "applied");
    assert!(claims_table_holds(&store, "generic:refund:rf_t").await);
    let item = payment_at(&store, "pay_t").await;
    assert!(!item.contains_key("rc#generic:refund:rf_t"));
    assert!(!item.contains_key("open"));
    assert!(item_size::item_bytes(&item) <= item_size::MAX_ITEM_BYTES);
    assert_eq!(
        (again.replayed, again.body.as_str()),
        (true, first.body.as_str())
    );
    assert_eq!(balance(&store, "w_l2").await, (0, 2));
}

#[tokio::test]
async fn a_refunds_own_write_applies_at_one_under_and_at_400_kb_and_is_refused_over() {
    // The third 400 KB edge: not the claim (above), the movement's own write. A payment that
    // cannot take it is refused by DynamoDB; nothing moves, and the delivery is answered
    // retryable, never applied.
    let store = store("hdlimit3").await;
    let app = app(store.clone(), 30_000);
    // GIVEN a twin payment refunded by the movement's own write alone (the claims table's
    // path), to size that write: same reference lengths, same amounts, same digits
    pay(&app, "pay_w9", "w_l3", 900).await;
    let twin = Reference::parse("pay_w9").unwrap();
    let (facts, _) = refund_facts("rf_pay_w9", "pay_w9", 900);
    let key = IdempotencyKey::from_stored("generic:refund:rf_pay_w9".into());
    let before = item_size::item_bytes(&payment_at(&store, "pay_w9").await);
    let done = store
        .refund(ProviderId::GENERIC, &facts, &key)
        .await
        .unwrap();
    assert!(matches!(done, RefundOutcome::Applied(_)), "{done:?}");
    let delta = item_size::item_bytes(&payment_at(&store, twin.as_str()).await) - before;
    for over in [-1i64, 0, 1] {
        // GIVEN a payment like it, padded so that its refund's write makes it 400 KB + `over`
        let p = format!("pay_w{}", over + 1);
        pay(&app, &p, "w_l3", 900).await;
        let start = item_size::item_bytes(&payment_at(&store, &p).await);
        let target = (item_size::MAX_ITEM_BYTES as i64 + over) as usize;
        pad(&store, &p, target - start - delta - 3).await;
        let padded = payment_at(&store, &p).await;
        let (facts, _) = refund_facts(&format!("rf_{p}"), &p, 900);
        let key = IdempotencyKey::from_stored(format!("generic:refund:rf_{p}"));

        // WHEN the refund's own write runs
        let got = store.refund(ProviderId::GENERIC, &facts, &key).await;

        // THEN at and under the limit it applies and the item is exactly that size; over it,
        // DynamoDB refuses it as too large and the payment is as it was
        let item = payment_at(&store, &p).await;
        if over <= 0 {
            assert!(
                matches!(got, Ok(RefundOutcome::Applied(_))),
                "{over}: {got:?}"
            );
            assert_eq!(item_size::item_bytes(&item), target, "{over}");
        } else {
            assert!(
                matches!(
                    got,
                    Err(payhook::store::StoreError::Rejected {
                        why: dynamo_claim::Rejection::TooLarge,
                        ..
                    })
                ),
                "{got:?}"
            );
            assert_eq!(item, padded);
        }
    }
    // WHEN the over-limit refund is delivered, twice
    let balance_before = balance(&store, "w_l3").await;
    let body = refund_body("e_w2", "rf_pay_w2", "pay_w2", 900);
    let first = send(&app, signed(&body)).await;
    let again = send(
        &app,
        signed(&refund_body("e_w2b", "rf_pay_w2", "pay_w2", 900)),
    )
    .await;
    // THEN neither is applied nor answered final: the first 5xx, the provider retries; the
    // second meets the first's claim, held until its lease ends, so 409 with Retry-After (a
    // later attempt takes it over and is refused again, and the stuck claim is what an
    // operator sees); nothing debited
    assert!(first.status >= 500 && !first.replayed, "{first:?}");
    assert_eq!((again.status, again.replayed), (409, false), "{again:?}");
    assert!(again.retry_after.is_some(), "{again:?}");
    let refunded = payment_at(&store, "pay_w2")
        .await
        .get("refunded_minor")
        .cloned();
    assert_eq!(refunded, Some(AttributeValue::N("0".into())));
    assert_eq!(balance(&store, "w_l3").await, balance_before);
    assert_eq!(balance_before, (4 * 900, 4));
}

/// A failure word about the payout `id`, as the generic provider sends it.
fn payout_failed(event_id: &str, id: &str) -> String {
    common::event_body(
        event_id,
        "transfer.failed",
        serde_json::json!({"reference": id, "amount": 100, "currency": "NGN"}),
    )
}

#[tokio::test]
async fn a_payout_words_answer_is_kept_at_one_under_and_at_400_kb_and_finished_without_it_over() {
    use payhook::domain::{Operation, TransferState};
    use payhook::payouts::{HeldWord, HeldWordCall, PayoutId, Payouts, WordOrigin};
    let store = store("pwlimit").await;
    let body = "{\"status\":\"applied\",\"answer\":\"".to_owned() + &"a".repeat(300) + "\"}";
    let answer = StoredResponse { status: 200, body };
    let origin = WordOrigin {
        provider: ProviderId::GENERIC,
        money: None,
        recipient: None,
    };
    let fp = payhook::domain::Fingerprint::from_stored("fp-of-the-word".into());
    for over in [-1i64, 0, 1] {
        // GIVEN a sent payout whose failure word's claim was taken on it (APPLYING), padded so
        // that the claim DONE with the answer makes it 400 KB + `over` bytes
        let id = PayoutId::parse(&format!("po_{:032x}", over + 1)).unwrap();
        payhook_tools::capacity::sent_payout(&store, id.as_str(), "w_plim")
            .await
            .unwrap();
        let key = IdempotencyKey::new(
            ProviderId::GENERIC,
            Operation::PayoutFailed,
            &id.reference(),
        );
        let word = HeldWordCall {
            origin: &origin,
            word: TransferState::Failed,
            provider_status: "failed",
            key: &key,
        };
        let token = OwnerToken::generate();
        let claim = NewHostClaim {
            token: &token,
            lease_ms: 30_000,
            fingerprint: &fp,
        };
        let taken = store.settle_held(&id, word, claim).await.unwrap();
        assert!(matches!(taken, HeldWord::Taken { .. }), "{taken:?}");
        let pk = format!("payout#{id}");
        let applying = item_at(&store, &pk).await;
        let open = attribute_bytes(&applying, "open");
        // As a refund's claim on its payment (above): DONE 4 bytes shorter, `as` and `ab` join.
        let finalize_delta = 5 + (3 + answer.body.len()) - 4;
        let finished = item_size::item_bytes(&applying) + finalize_delta - open;
        let target = (item_size::MAX_ITEM_BYTES as i64 + over) as usize;
        pad_item(&store, &pk, target - finished - 3).await;

        // WHEN the claim is finalized with its answer
        let done = store
            .finalize_word(&id, &key, &token, &answer)
            .await
            .unwrap();

        // THEN it is DONE either way; at and under the limit with the answer (the item exactly
        // that size), over it with the status alone
        assert_eq!(done, FinalizeOutcome::Done, "{over}");
        let item = item_at(&store, &pk).await;
        let claim = item.get(&format!("rc#{key}")).unwrap().as_m().unwrap();
        assert_eq!(claim["st"].as_s().unwrap(), "DONE", "{over}");
        assert!(!item.contains_key("open"), "{over}");
        let record = store.payout(&id).await.unwrap().unwrap();
        let state = record.held_claims[key.as_str()].state.clone();
        if over <= 0 {
            assert_eq!(item_size::item_bytes(&item), target, "{over}");
            assert_eq!(state, ClaimState::Done(answer.clone()), "{over}");
        } else {
            assert!(
                item_size::item_bytes(&item) < item_size::MAX_ITEM_BYTES,
                "{over}"
            );
            assert_eq!(state, ClaimState::DoneUnrecorded { status: 200 }, "{over}");
        }
    }
}

#[tokio::test]
async fn a_payout_word_whose_claim_does_not_fit_on_its_payout_is_claimed_in_the_claims_table() {
    // GIVEN a sent payout failed the usual way (the claim on it), to size a word's write, and a
    // payout like it padded so that the word's write fits without its claim but not with it
    let store = store("pwlimit1").await;
    let app = app(store.clone(), 30_000);
    let (s, t) = (
        "po_000000000000000000000000000000a1",
        "po_000000000000000000000000000000a2",
    );
    for id in [s, t] {
        payhook_tools::capacity::sent_payout(&store, id, "w_pl1")
            .await
            .unwrap();
    }
    let before = item_size::item_bytes(&item_at(&store, &format!("payout#{s}")).await);
    let r = send(&app, signed(&payout_failed("e_s", s))).await;
    assert_eq!(r.json()["status"], "applied", "{r:?}");
    let after = item_at(&store, &format!("payout#{s}")).await;
    let claim_done = attribute_bytes(&after, &format!("rc#generic:payout_failed:{s}"));
    // `plain` is what the word's write adds without its claim (its `open` entry removed).
    let plain = item_size::item_bytes(&after) as i64 - claim_done as i64 - before as i64;
    // The claim while APPLYING, and `open` = `POSTING#n` (4 + 9 or 10 bytes).
    let claim_applying = claim_done - 5 - (3 + r.body.len()) + 4 + 13;
    assert!(claim_applying > 100, "{claim_applying}");
    let aim = item_size::MAX_ITEM_BYTES as i64 - plain - (claim_applying / 2) as i64;
    let start = item_size::item_bytes(&item_at(&store, &format!("payout#{t}")).await) as i64;
    pad_item(&store, &format!("payout#{t}"), (aim - start - 3) as usize).await;

    // WHEN the padded payout's failure comes, and comes again
    let first = send(&app, signed(&payout_failed("e_t", t))).await;
    let again = send(&app, signed(&payout_failed("e_t2", t))).await;

    // THEN it applied once through the claims table (no claim on the payout), its duplicate
    // replays the claims table's answer, and the payout is credited back once
    assert_eq!((first.status, first.replayed), (200, false), "{first:?}");
    assert_eq!(first.json()["status"], "applied");
    let key = format!("generic:payout_failed:{t}");
    assert!(claims_table_holds(&store, &key).await);
    let item = item_at(&store, &format!("payout#{t}")).await;
    assert!(!item.contains_key(&format!("rc#{key}")));
    assert!(!item.contains_key("open"));
    assert!(item_size::item_bytes(&item) <= item_size::MAX_ITEM_BYTES);
    assert_eq!(
        (again.replayed, again.body.as_str()),
        (true, first.body.as_str())
    );
    assert_eq!(balance(&store, "w_pl1").await, (200, 2));
}

/// Delivers `kind` through the claims table's path (as reconciliation resumes a claims-table
/// claim), skipping the path that claims on the item.
async fn through_the_claims_table(
    store: &DynamoStore,
    kind: payhook::domain::EventKind,
) -> payhook::pipeline::Answer {
    let event = payhook::domain::NormalisedEvent {
        provider: ProviderId::GENERIC,
        event_id: "evt_claims_path".into(),
        event_type: payhook::pipeline::RESUME_EVENT_TYPE.into(),
        kind,
        transaction_id: None,
    };
    payhook::pipeline::Pipeline::new(store.clone())
        .process(payhook::pipeline::Delivered {
            event: &event,
            raw_body: "{}",
            received_at_ms: payhook::domain::now_ms(),
            lease_ms: 30_000,
            replay_of: None,
            started_by: None,
            headers: Vec::new(),
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn the_claims_tables_path_defers_to_a_claim_that_won_on_the_item() {
    use payhook::domain::{EventKind, Operation, TransferFacts, TransferState};
    use payhook::payouts::{HeldWord, HeldWordCall, PayoutId, Payouts, WordOrigin};
    // GIVEN a refund and a payout's failure word, each applied by an attempt whose claim on
    // its item is still APPLYING (a delivery meeting a busy payment may reach the claims table
    // meanwhile: two claims for one key, unless the second defers)
    let store = store("hdwon").await;
    let app = app(store.clone(), 30_000);
    pay(&app, "pay_won", "w_won", 900).await;
    let (facts, fp) = refund_facts("rf_won", "pay_won", 900);
    let key = IdempotencyKey::from_stored("generic:refund:rf_won".into());
    let token = OwnerToken::generate();
    let claim = NewHostClaim {
        token: &token,
        lease_ms: 30_000,
        fingerprint: &fp,
    };
    let held = store.hold(ProviderId::GENERIC, HeldMove::Refund(&facts), &key, claim);
    assert!(matches!(held.await.unwrap(), Hosted::Taken(_)));
    let id = PayoutId::parse("po_000000000000000000000000000000b1").unwrap();
    payhook_tools::capacity::sent_payout(&store, id.as_str(), "w_won")
        .await
        .unwrap();
    let word_key = IdempotencyKey::new(
        ProviderId::GENERIC,
        Operation::PayoutFailed,
        &id.reference(),
    );
    let origin = WordOrigin {
        provider: ProviderId::GENERIC,
        money: None,
        recipient: None,
    };
    let word = HeldWordCall {
        origin: &origin,
        word: TransferState::Failed,
        provider_status: "failed",
        key: &word_key,
    };
    let word_claim = NewHostClaim {
        token: &token,
        lease_ms: 30_000,
        fingerprint: &fp,
    };
    let taken = store.settle_held(&id, word, word_claim).await.unwrap();
    assert!(matches!(taken, HeldWord::Taken { .. }), "{taken:?}");
    let refund = || EventKind::RefundSucceeded(facts.clone());
    let failed = || {
        EventKind::Transfer(TransferFacts {
            reference: id.reference(),
            state: TransferState::Failed,
            provider_status: "failed".into(),
            money: None,
            recipient: None,
        })
    };

    // WHEN each comes through the claims table's path
    // THEN it answers "in flight" (retryable), posts nothing and keeps no claim there
    for (what, kind, k) in [("refund", refund(), &key), ("word", failed(), &word_key)] {
        let a = through_the_claims_table(&store, kind).await;
        assert_eq!(a.status, 409, "{what}: {a:?}");
        assert!(!claims_table_holds(&store, k.as_str()).await, "{what}");
    }
    assert_eq!(balance(&store, "w_won").await, (900, 1));

    // WHEN the winners finish, and each comes through the claims table's path again
    let answer = |body: &str| StoredResponse {
        status: 200,
        body: body.into(),
    };
    let done = store
        .finalize_held(
            ProviderId::GENERIC,
            &facts.payment_reference,
            &key,
            &token,
            &answer("{\"refund\":1}"),
        )
        .await
        .unwrap();
    assert_eq!(done, FinalizeOutcome::Done);
    let done = store
        .finalize_word(&id, &word_key, &token, &answer("{\"word\":1}"))
        .await
        .unwrap();
    assert_eq!(done, FinalizeOutcome::Done);

    // THEN it replays the winner's answer byte for byte, and moves no money of its own
    for (what, kind, body) in [
        ("refund", refund(), "{\"refund\":1}"),
        ("word", failed(), "{\"word\":1}"),
    ] {
        let a = through_the_claims_table(&store, kind).await;
        assert_eq!(
            (a.status, a.replayed, a.body.as_str()),
            (200, true, body),
            "{what}"
        );
    }
    assert_eq!(balance(&store, "w_won").await, (900, 1));
}
