//! The core contract end to end through the real router, against dynalite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

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
    let again = send(
        &app,
        signed(&payment_body("evt_2", "pay_1", "wallet_42", 125_000, "NGN")),
    )
    .await;

    // THEN the first applies, the duplicate replays the same bytes, and one credit exists
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(!first.replayed);
    assert_eq!(first.json()["status"], "applied");
    assert_eq!(first.json()["key"], "generic:payment:pay_1");
    assert_eq!(first.json()["amount"], 125_000);
    assert_eq!(again.status, 200);
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    let balance = store
        .balance(&AccountId::parse("wallet_42").unwrap())
        .await
        .unwrap();
    assert_eq!(
        balance.balances.get(&Currency::parse("NGN").unwrap()),
        Some(&125_000)
    );
    assert_eq!(balance.entries, 1);
}

use std::collections::HashMap;

use payhook::domain::{IdempotencyKey, ProviderId, Reference};
use payhook::dynamodb::observe::RequestCounter;
use payhook::eventlog::{EventLog, LogFilter, Outcome};
use payhook::idempotency::{ClaimOutcome, Claims, StoredResponse};
use payhook::payments::Payments;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

async fn balance_of(store: &payhook::dynamodb::DynamoStore, account: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    (b.balances.get(&ngn()).copied().unwrap_or(0), b.entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_deliveries_credit_exactly_once() {
    // GIVEN one event delivered 64 times at once
    let store = store("race64").await;
    let app = app(store.clone(), 30_000);
    let body = payment_body("evt_race", "pay_race", "wallet_race", 125_000, "NGN");
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { send(&app, signed(&body)).await })
        })
        .collect();
    let replies: Vec<Resp> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();

    // THEN exactly one applied; every other answer is a byte-identical replay or a 409
    let applied: Vec<&Resp> = replies
        .iter()
        .filter(|r| r.status == 200 && !r.replayed)
        .collect();
    assert_eq!(applied.len(), 1, "{replies:?}");
    for r in &replies {
        match (r.status, r.replayed) {
            (200, false) => {}
            (200, true) => assert_eq!(r.body, applied[0].body),
            (409, false) => assert!(r.retry_after.is_some(), "409 without Retry-After"),
            other => panic!("unexpected answer {other:?}: {}", r.body),
        }
    }
    // AND one credit, one ledger entry, balance = amount
    assert_eq!(balance_of(&store, "wallet_race").await, (125_000, 1));
    // AND every delivery is in the log
    let filter = LogFilter {
        reference: Some(Reference::parse("pay_race").unwrap()),
        ..LogFilter::default()
    };
    assert_eq!(
        store
            .query(&filter, 100, None)
            .await
            .unwrap()
            .deliveries
            .len(),
        64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_references_interleaved_sum_to_unique_amounts() {
    // GIVEN 200 references, each delivered 1–5 times, shuffled, 16 in flight
    let store = store("many").await;
    let app = app(store.clone(), 30_000);
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut deliveries = Vec::new();
    let mut expected = 0i64;
    for i in 0..200 {
        let amount = rng.gen_range(1..1_000_000);
        expected += amount;
        for copy in 0..rng.gen_range(1..=5) {
            deliveries.push(payment_body(
                &format!("evt_{i}_{copy}"),
                &format!("ref_{i}"),
                "wallet_many",
                amount,
                "NGN",
            ));
        }
    }
    deliveries.shuffle(&mut rng);
    let total = deliveries.len();

    // WHEN they are sent with 16 concurrent senders that retry 409s like a provider
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    let results = futures::stream::iter(deliveries)
        .map(|body| {
            let app = app.clone();
            async move {
                loop {
                    let r = send(&app, signed(&body)).await;
                    if r.status != 409 {
                        return r.status;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<u16>>()
        .await;
    for s in results {
        *statuses.entry(s).or_default() += 1;
    }

    // THEN every delivery got 200, and the balance is the sum of unique amounts, one entry each
    assert_eq!(
        statuses.get(&200),
        Some(&total),
        "seed {seed}: {statuses:?}"
    );
    assert_eq!(
        balance_of(&store, "wallet_many").await,
        (expected, 200),
        "seed {seed}"
    );
}

use futures::StreamExt;

#[tokio::test]
async fn duplicate_claim_falls_back_to_a_consistent_get_when_no_item_is_returned() {
    // GIVEN a claimed-and-finalized key in the claims table, and a client that counts requests
    let base = store("fallback").await;
    let key = IdempotencyKey::from_stored("generic:refund:re_fb".into());
    let fp = payhook::domain::Fingerprint::from_stored(r#"{"op":"refund"}"#.into());
    let ClaimOutcome::Claimed { token, .. } = base.claim(&key, &fp, 30_000).await.unwrap() else {
        panic!("a fresh key is claimed")
    };
    let answer = StoredResponse {
        status: 200,
        body: "{}".into(),
    };
    base.finalize(&key, &token, &answer).await.unwrap();
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    // A process reads the stored layout once (claims are placed in the index by it).
    counted.placement_layout().await.unwrap();
    counter.reset();

    // WHEN the same key is claimed again
    let outcome = counted.claim(&key, &fp, 30_000).await.unwrap();

    // THEN dynalite returned no ALL_OLD item, so exactly one consistent GetItem decided: replay
    assert!(
        matches!(outcome, ClaimOutcome::Replay(ref r) if r.status == 200),
        "{outcome:?}"
    );
    assert_eq!(counter.get("PutItem"), 1);
    assert_eq!(counter.get("GetItem"), 1);
    assert_eq!(counter.writes() + counter.reads(), 2);
}

#[tokio::test]
async fn a_new_payment_costs_four_writes_and_no_read() {
    let base = store("cost").await;
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    let app = app(counted, 30_000);
    // A process's first credit reads the ledger layout once (one GetItem per process, cached).
    let warm = send(
        &app,
        signed(&payment_body("evt_w", "pay_w", "wallet_c", 10, "NGN")),
    )
    .await;
    assert_eq!(warm.status, 200);
    assert_eq!(counter.get("GetItem"), 1, "{:?}", counter.snapshot());
    counter.reset();
    let r = send(
        &app,
        signed(&payment_body("evt_c", "pay_c", "wallet_c", 10, "NGN")),
    )
    .await;
    assert_eq!(r.status, 200);
    // payment transition + its credit's claim, ledger entry, the claim DONE, log (#32)
    assert_eq!(counter.writes(), 4, "{:?}", counter.snapshot());
    assert_eq!(counter.get("UpdateItem"), 2, "{:?}", counter.snapshot());
    assert_eq!(counter.get("PutItem"), 2, "{:?}", counter.snapshot());
    assert_eq!(counter.reads(), 0, "{:?}", counter.snapshot());

    // AND a duplicate costs its failed paid write, the read dynalite needs for want of an
    // ALL_OLD image, and its log entry; it is answered the stored body byte for byte
    counter.reset();
    let dup = send(
        &app,
        signed(&payment_body("evt_c2", "pay_c", "wallet_c", 10, "NGN")),
    )
    .await;
    assert!(dup.replayed, "{dup:?}");
    assert_eq!(dup.body, r.body);
    assert_eq!(
        (
            counter.get("UpdateItem"),
            counter.get("GetItem"),
            counter.get("PutItem")
        ),
        (1, 1, 1),
        "{:?}",
        counter.snapshot()
    );
    assert_eq!(balance_of(&base, "wallet_c").await, (20, 2));
}

/// A credit's duplicate reads the credit's view of its payment (#44): the same bytes after 50
/// refunds as on a payment with none, though the payment's item has grown by kilobytes.
#[tokio::test]
async fn a_credits_duplicate_reads_no_more_after_fifty_refunds() {
    // GIVEN two payments credited, and 50 partial refunds of one of them
    let base = store("dupgrow").await;
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    let app = app(counted, 30_000);
    let mut first = Vec::new();
    for p in ["pay_fresh", "pay_grown"] {
        let r = send(
            &app,
            signed(&payment_body(
                &format!("evt_{p}"),
                p,
                "wallet_g",
                10_000,
                "NGN",
            )),
        )
        .await;
        assert_eq!((r.status, r.replayed), (200, false), "{r:?}");
        first.push(r.body);
    }
    for i in 0..50 {
        let data = serde_json::json!({"reference": format!("rf_{i:02}"), "payment_reference": "pay_grown", "amount": 1, "currency": "NGN"});
        let r = send(
            &app,
            signed(&event_body(
                &format!("evt_rf_{i}"),
                "refund.succeeded",
                data,
            )),
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert_eq!(balance_of(&base, "wallet_g").await.0, 20_000 - 50);

    // WHEN each credit's delivery comes again
    let mut read = Vec::new();
    for (i, p) in ["pay_fresh", "pay_grown"].into_iter().enumerate() {
        counter.reset();
        let dup = send(
            &app,
            signed(&payment_body(
                &format!("evt_{p}_again"),
                p,
                "wallet_g",
                10_000,
                "NGN",
            )),
        )
        .await;
        // THEN each replays its stored answer byte for byte, at the duplicate's three calls
        assert!(dup.replayed, "{dup:?}");
        assert_eq!(dup.body, first[i]);
        let calls = (
            counter.get("UpdateItem"),
            counter.get("GetItem"),
            counter.get("PutItem"),
        );
        assert_eq!(calls, (1, 1, 1), "{:?}", counter.snapshot());
        read.push(counter.bytes_in());
    }
    // AND the grown payment's duplicate read what the fresh one's did but for its status and
    // total (`PARTIALLY_REFUNDED` is 14 bytes longer than `PAID`, `refunded_minor` 50 one digit
    // longer than 0), while reading its whole item takes kilobytes more
    assert!(read[0] > 500, "the counter counts: {read:?}");
    assert!(
        read[1].abs_diff(read[0]) <= 15,
        "duplicate reads grew: {read:?}"
    );
    let mut whole = Vec::new();
    for p in ["pay_fresh", "pay_grown"] {
        counter.reset();
        let reference = payhook::domain::Reference::parse(p).unwrap();
        let payment = payhook::payments::Payments::payment(
            &store_with(&base, sdk_builder().interceptor(counter.clone())),
            payhook::domain::ProviderId::GENERIC,
            &reference,
        )
        .await
        .unwrap();
        assert!(payment.is_some());
        whole.push(counter.bytes_in());
    }
    assert!(
        whole[1] > whole[0] + 3_000,
        "the refunds grew the item: {whole:?}"
    );
}

/// The one duplicate that reads twice on dynalite: a credit whose payment holds debits parked
/// before it was paid reads the credit's fields, then the item whole (the parked debits are
/// judged by the refund key sets, which the credit's view leaves out).
#[tokio::test]
async fn a_credits_duplicate_with_parked_debits_reads_the_payment_whole() {
    // GIVEN a refund of 300 parked before its payment of 1,000, and the payment's credit
    let base = store("dupparked").await;
    let counter = RequestCounter::new();
    let counted = store_with(&base, sdk_builder().interceptor(counter.clone()));
    let app = app(counted, 30_000);
    let data = serde_json::json!({"reference": "rf_pk", "payment_reference": "pay_pk", "amount": 300, "currency": "NGN"});
    let parked = send(
        &app,
        signed(&event_body("evt_rf_pk", "refund.succeeded", data)),
    )
    .await;
    assert_eq!(parked.status, 409, "{parked:?}");
    let body = payment_body("evt_pk", "pay_pk", "wallet_pk", 1_000, "NGN");
    let first = send(&app, signed(&body)).await;
    assert_eq!((first.status, first.replayed), (200, false), "{first:?}");
    assert_eq!(balance_of(&base, "wallet_pk").await, (700, 2));

    // WHEN the credit's delivery comes again
    counter.reset();
    let dup = send(
        &app,
        signed(&payment_body(
            "evt_pk_again",
            "pay_pk",
            "wallet_pk",
            1_000,
            "NGN",
        )),
    )
    .await;

    // THEN it replays the stored answer, having read the payment twice, and nothing moved
    assert!(dup.replayed, "{dup:?}");
    assert_eq!(dup.body, first.body);
    let calls = (
        counter.get("UpdateItem"),
        counter.get("GetItem"),
        counter.get("PutItem"),
    );
    assert_eq!(calls, (1, 2, 1), "{:?}", counter.snapshot());
    assert_eq!(balance_of(&base, "wallet_pk").await, (700, 2));
}

/// Records the headers of every request as it leaves (after signing).
#[derive(Debug, Clone, Default)]
struct SentHeaders(std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>);

impl aws_sdk_dynamodb::config::Intercept for SentHeaders {
    fn name(&self) -> &'static str {
        "SentHeaders"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let names = ctx
            .request()
            .headers()
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase());
        self.0.lock().unwrap().push(names.collect());
        Ok(())
    }
}

#[tokio::test]
async fn requests_leave_signed_without_the_sdk_telemetry_headers() {
    // GIVEN the binaries' client settings (`dynamodb::lean`, which `sdk_builder` applies)
    let base = store("lean").await;
    let sent = SentHeaders::default();
    let app = app(
        store_with(&base, sdk_builder().interceptor(sent.clone())),
        30_000,
    );
    // WHEN a new delivery and its duplicate go through
    let body = payment_body("evt_l", "pay_l", "wallet_l", 700, "NGN");
    assert_eq!(send(&app, signed(&body)).await.status, 200);
    assert!(send(&app, signed(&body)).await.replayed);
    // THEN the money moved once, and every request was signed and carried none of the three
    // headers the lean client switches off
    assert_eq!(balance_of(&base, "wallet_l").await, (700, 1));
    let sent = sent.0.lock().unwrap().clone();
    assert!(sent.len() >= 8, "{} requests", sent.len());
    for headers in &sent {
        for must in ["authorization", "x-amz-date", "content-type"] {
            assert!(
                headers.iter().any(|h| h == must),
                "{must} missing: {headers:?}"
            );
        }
        for gone in [
            "user-agent",
            "x-amz-user-agent",
            "amz-sdk-invocation-id",
            "amz-sdk-request",
        ] {
            assert!(
                !headers.iter().any(|h| h == gone),
                "{gone} sent: {headers:?}"
            );
        }
    }
}

#[tokio::test]
async fn same_reference_with_other_money_is_a_conflict_that_moves_nothing() {
    let store = store("conflict").await;
    let app = app(store.clone(), 30_000);
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e1", "pay_x", "w_x", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    for other in [
        payment_body("e2", "pay_x", "w_x", 2_000, "NGN"),
        payment_body("e3", "pay_x", "w_x", 1_000, "USD"),
        payment_body("e4", "pay_x", "w_other", 1_000, "NGN"),
    ] {
        let r = send(&app, signed(&other)).await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert_eq!(r.json()["error"], "reference_conflict");
    }
    assert_eq!(balance_of(&store, "w_x").await, (1_000, 1));
    assert_eq!(balance_of(&store, "w_other").await, (0, 0));
}

#[tokio::test]
async fn a_key_in_flight_gets_409_with_retry_after() {
    // GIVEN another invocation paid the payment and holds its credit's claim with a live lease
    // (its first write done, its ledger entry not yet)
    let store = store("inflight").await;
    let app = app(store.clone(), 30_000);
    let key = IdempotencyKey::from_stored("generic:payment:pay_if".into());
    let facts = payhook::domain::ClaimedFacts::parse_kind(&payhook::domain::Fingerprint::from_stored(
        r#"{"op":"payment","reference":"pay_if","account":"w_if","amount":10,"currency":"NGN"}"#.into(),
    ));
    let Ok(payhook::domain::EventKind::PaymentSucceeded(facts)) = facts else {
        panic!("payment facts")
    };
    let fp = payhook::domain::ClaimedFacts::of(&payhook::domain::EventKind::PaymentSucceeded(
        facts.clone(),
    ))
    .unwrap()
    .fingerprint();
    let token = payhook::idempotency::OwnerToken::generate();
    let new = payhook::payments::NewCredit {
        shard: 0,
        default_account: None,
        claim: Some(payhook::payments::NewHostClaim {
            token: &token,
            lease_ms: 60_000,
            fingerprint: &fp,
        }),
    };
    let held = store
        .mark_paid(payhook::domain::ProviderId::GENERIC, &facts, &key, new)
        .await
        .unwrap();
    assert!(matches!(held, payhook::payments::PaidOutcome::Applied(_)));

    // WHEN the provider delivers
    let r = send(
        &app,
        signed(&payment_body("e", "pay_if", "w_if", 10, "NGN")),
    )
    .await;

    // THEN 409 + Retry-After, nothing credited, the delivery logged as in flight
    assert_eq!(r.status, 409, "{}", r.body);
    let retry: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((56..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(balance_of(&store, "w_if").await, (0, 0));
    let filter = LogFilter {
        outcome: Some(Outcome::InFlight),
        ..LogFilter::default()
    };
    assert_eq!(
        store
            .query(&filter, 10, None)
            .await
            .unwrap()
            .deliveries
            .len(),
        1
    );
}

#[tokio::test]
async fn other_event_types_are_ignored_and_logged() {
    let store = store("ignored").await;
    let app = app(store.clone(), 30_000);
    let body = event_body(
        "evt_cust",
        "customer.created",
        serde_json::json!({"id": "cus_1"}),
    );
    let r = send(&app, signed(&body)).await;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (200, Some("ignored"))
    );
    let filter = LogFilter {
        provider: Some(ProviderId::GENERIC),
        event_id: Some("evt_cust".into()),
        ..LogFilter::default()
    };
    let logged = store.query(&filter, 10, None).await.unwrap().deliveries;
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].outcome, Outcome::Ignored);
    // Listed from the event index, which never carries bodies; read from the table on demand.
    assert_eq!(logged[0].raw_body, None);
    assert_eq!(
        store
            .with_body(&logged[0])
            .await
            .unwrap()
            .raw_body
            .as_deref(),
        Some(body.as_str())
    );
}

#[tokio::test]
async fn signatures_valid_tampered_wrong_secret_rotated_stale_and_future() {
    let store = store("sigs").await;
    let app = app(store.clone(), 30_000);
    let body = payment_body("e_sig", "pay_sig", "w_sig", 10, "NGN");
    let now = now_s();
    let cases: Vec<(&str, axum::http::Request<axum::body::Body>, u16)> = vec![
        (
            "tampered body",
            {
                let mut r = signed(&body);
                *r.body_mut() =
                    axum::body::Body::from(body.replace("\"amount\":10", "\"amount\":99"));
                r
            },
            401,
        ),
        (
            "wrong secret",
            signed_with(&body, "whsec_d3Jvbmctc2VjcmV0", now),
            401,
        ),
        (
            "stale timestamp",
            signed_with(&body, SECRET, now - 301),
            401,
        ),
        (
            "future timestamp",
            // A minute past the tolerance: time spent on a loaded machine before the check
            // brings a future stamp closer (the exact edge is the verifier's unit tests').
            signed_with(&body, SECRET, now + 360),
            401,
        ),
        (
            "missing signature",
            {
                let mut r = signed(&body);
                r.headers_mut().remove("webhook-signature");
                r
            },
            401,
        ),
    ];
    for (name, req, status) in cases {
        let r = send(&app, req).await;
        assert_eq!(r.status, status, "{name}: {}", r.body);
        assert_eq!(r.json()["error"], "invalid_signature", "{name}");
    }
    assert_eq!(
        counts(&store).await,
        [0, 0, 0, 0],
        "rejected requests wrote something"
    );
    // The second of two configured secrets verifies (rotation), and so does the first.
    assert_eq!(
        send(&app, signed_with(&body, SECRET, now)).await.status,
        200
    );
    let other = payment_body("e_sig2", "pay_sig2", "w_sig", 10, "NGN");
    assert_eq!(
        send(&app, signed_with(&other, OTHER_SECRET, now))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn bad_input_is_refused_with_the_field_named_and_writes_nothing() {
    let store = store("badinput").await;
    let app = app(store.clone(), 30_000);
    let data = |amount: &str, currency: &str| {
        format!(
            r#"{{"id":"e","type":"payment.succeeded","data":{{"reference":"p","account":"a","amount":{amount},"currency":{currency}}}}}"#
        )
    };
    let cases = [
        ("{not json", 400, "malformed_json", None),
        (
            r#"{"type":"payment.succeeded","data":{}}"#,
            400,
            "invalid_field",
            Some("id"),
        ),
        (
            r#"{"id":"e","type":"payment.succeeded","data":{"account":"a","amount":1,"currency":"NGN"}}"#,
            400,
            "invalid_field",
            Some("data.reference"),
        ),
        (
            &data("1.5", r#""NGN""#) as &str,
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            &data("0", r#""NGN""#),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            &data("-100", r#""NGN""#),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            &data(r#""100""#, r#""NGN""#),
            400,
            "invalid_field",
            Some("data.amount"),
        ),
        (
            &data("100", r#""NAIRA""#),
            400,
            "invalid_field",
            Some("data.currency"),
        ),
        (
            &data("100", "null"),
            400,
            "invalid_field",
            Some("data.currency"),
        ),
    ];
    for (body, status, error, field) in cases {
        let r = send(&app, signed(body)).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert_eq!(r.json()["error"], error, "{body}");
        if let Some(f) = field {
            assert_eq!(r.json()["field"], f, "{body}");
        }
    }
    let huge = format!(
        r#"{{"id":"e","type":"x","pad":"{}"}}"#,
        "a".repeat(256 * 1024)
    );
    let r = send(&app, signed(&huge)).await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (413, Some("payload_too_large"))
    );
    let r = send(
        &app,
        axum::http::Request::post("/webhooks/nope")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        counts(&store).await,
        [0, 0, 0, 0],
        "rejected requests wrote something"
    );
}

/// A generic delivery as API Gateway hands it to the function, from `source_ip`.
fn via_api_gateway(body: &str, source_ip: &str) -> axum::http::Request<axum::body::Body> {
    let file = format!(
        "{}/events/generic/payment_succeeded.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut event: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let signed = signed(body);
    for (k, v) in signed.headers() {
        event["headers"][k.as_str()] = serde_json::json!(v.to_str().unwrap());
    }
    event["body"] = serde_json::json!(body);
    event["requestContext"]["http"]["sourceIp"] = serde_json::json!(source_ip);
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let (parts, b) = req.into_parts();
    axum::http::Request::from_parts(parts, axum::body::Body::from(b.to_vec()))
}

#[tokio::test]
async fn a_source_outside_the_providers_allowlist_is_refused_and_writes_nothing() {
    // GIVEN the generic provider allowed only from 203.0.113.0/24 and one IPv6 address
    let store = store("source_ips").await;
    let config = payhook::config::Config::from_lookup(|name| match name {
        "PAYHOOK_GENERIC_SECRETS" => Some(SECRET.to_owned()),
        "PAYHOOK_GENERIC_SOURCE_IPS" => Some("203.0.113.0/24, 2001:db8::7".to_owned()),
        _ => None,
    })
    .unwrap();
    let app = payhook::runtime::build_app(&config, store.clone());
    let body = payment_body("e_src", "pay_src", "w_src", 700, "NGN");

    // WHEN it arrives from elsewhere, and with no source known (not through API Gateway)
    let outside = send(&app, via_api_gateway(&body, "198.51.100.7")).await;
    let unknown = send(&app, signed(&body)).await;

    // THEN each is refused with a clear answer, and nothing is written
    for r in [&outside, &unknown] {
        assert_eq!(
            (r.status, r.json()["error"].clone()),
            (403, serde_json::json!("source_not_allowed")),
            "{}",
            r.body
        );
    }
    assert_eq!(counts(&store).await, [0, 0, 0, 0]);

    // WHEN it arrives from an allowed address (either family)
    let inside = send(&app, via_api_gateway(&body, "203.0.113.44")).await;
    let v6 = send(&app, via_api_gateway(&body, "2001:db8::7")).await;

    // THEN it is applied once
    assert_eq!(
        inside.json()["status"],
        serde_json::json!("applied"),
        "{}",
        inside.body
    );
    assert_eq!((v6.status, v6.replayed), (200, true));
    assert_eq!(balance_of(&store, "w_src").await, (700, 1));

    // AND an unreadable list stops start-up instead of opening or closing the door
    let bad = payhook::config::Config::from_lookup(|name| {
        (name == "PAYHOOK_STRIPE_SOURCE_IPS").then(|| "52.31.139.75 not-an-ip".to_owned())
    });
    assert!(bad.is_err());
}

#[tokio::test]
async fn a_source_outside_the_allowlist_costs_no_read_of_the_secrets() {
    // GIVEN the generic provider allowed only from 203.0.113.0/24, its secret not readable yet
    // (from Secrets Manager: every forced read counted)
    let store = store("source_reads").await;
    let config = payhook::config::Config::from_lookup(|name| match name {
        "PAYHOOK_GENERIC_SOURCE_IPS" => Some("203.0.113.0/24".to_owned()),
        _ => None,
    })
    .unwrap();
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut app = payhook::runtime::build_app(&config, store.clone());
    {
        let a = std::sync::Arc::get_mut(&mut app).unwrap();
        let (providers, _) = config.providers();
        let refresh = CountingRefresh {
            config: config.clone(),
            reads: reads.clone(),
        };
        a.providers =
            payhook::http::live::LiveProviders::refreshed(providers, Box::new(refresh), i64::MAX);
    }
    let body = payment_body("e_sr", "pay_sr", "w_sr", 700, "NGN");

    // WHEN a flood arrives from outside the list
    for _ in 0..5 {
        let r = send(&app, via_api_gateway(&body, "198.51.100.7")).await;
        assert_eq!(r.status, 403, "{}", r.body);
    }

    // THEN not one of them read the secrets
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 0);

    // WHEN one arrives from inside the list
    let inside = send(&app, via_api_gateway(&body, "203.0.113.9")).await;

    // THEN only it may try to read them (and finds no secret: 503)
    assert_eq!(inside.status, 503, "{}", inside.body);
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
}
