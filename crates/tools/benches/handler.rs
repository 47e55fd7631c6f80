//! Handler *logic* CPU per delivery, excluding the SDK and all I/O: verify the Standard Webhooks
//! signature, strictly parse and normalise the body, take the pure decisions the pipeline takes
//! on the store's answers, and serialise the answer body and the EMF metrics line.
//!
//! This is a small part of what a delivery costs the process: the whole-process CPU per delivery
//! (HTTP or the Lambda runtime, the SDK's five DynamoDB round trips, allocation, syscalls) is
//! measured by benches/cpu.py (`scripts/bench`), about a hundred times this figure.
//!
//! `cargo bench -p payhook-tools --bench handler`. Target: the `handler/total` median under 50 µs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use payhook::domain::{
    AccountId, Currency, EventKind, IdempotencyKey, NormalisedEvent, PaymentStatus, ProviderId,
    Reference,
};
use payhook::eventlog::Outcome;
use payhook::idempotency::{judge_existing, ClaimRecord, ClaimState, StoredResponse};
use payhook::metrics::{emf_line, Disposition};
use payhook::payments::{judge_paid, PaymentRecord};
use payhook::pipeline::Applied;
use payhook::providers::generic::{Generic, StandardWebhooks};
use payhook::providers::Provider;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOW_S: i64 = 1_764_670_000;
const BODY: &str = r#"{"id":"evt_1","type":"payment.succeeded","created":1764670000,"data":{"reference":"pay_1","account":"wallet_42","amount":125000,"currency":"NGN"}}"#;

fn headers(scheme: &StandardWebhooks) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("webhook-id", HeaderValue::from_static("msg_bench"));
    h.insert("webhook-timestamp", HeaderValue::from(NOW_S));
    h.insert(
        "webhook-signature",
        HeaderValue::from_str(&scheme.sign("msg_bench", NOW_S, BODY.as_bytes())).unwrap(),
    );
    h
}

/// What the store would hand the judges: the finalized claim (a duplicate's ALL_OLD item) and the
/// paid payment (a resumed attempt's failed transition).
struct Stored {
    claim: ClaimRecord,
    payment: PaymentRecord,
}

fn stored(ev: &NormalisedEvent) -> Stored {
    let key = ev.key().unwrap();
    let EventKind::PaymentSucceeded(p) = &ev.kind else {
        panic!("payment expected")
    };
    Stored {
        claim: ClaimRecord {
            key: key.to_string(),
            state: ClaimState::Done(StoredResponse {
                status: 200,
                body: "{\"status\":\"applied\"}".into(),
            }),
            fingerprint: fingerprint(ev),
        },
        payment: PaymentRecord {
            provider: ProviderId::GENERIC,
            reference: Reference::parse("pay_1").unwrap(),
            status: PaymentStatus::Paid,
            account: Some(AccountId::parse("wallet_42").unwrap()),
            amount_minor: Some(p.money.amount.get()),
            currency: Some(Currency::parse("NGN").unwrap()),
            refunded_minor: 0,
            refund_keys: Vec::new(),
            reversed_refund_keys: Vec::new(),
            paid_key: Some(key.clone()),
            dispute_keys: Vec::new(),
            disputed_minor: 0,
            parked_debits: Vec::new(),
            disputes: Vec::new(),
            ledger_shard: Some(0),
            credit_at_ms: Some(0),
            claim: None,
            held_claims: Default::default(),
            posting: false,
            history: Vec::new(),
            created_at_ms: 0,
            updated_at_ms: 0,
        },
    }
}

/// The claim fingerprint, by the pipeline's own code.
fn fingerprint(ev: &NormalisedEvent) -> payhook::domain::Fingerprint {
    payhook::domain::ClaimedFacts::of(&ev.kind)
        .map(|f| f.fingerprint())
        .unwrap_or_else(|| payhook::domain::Fingerprint::from_stored(String::new()))
}

/// Both judges the pipeline may consult, on the store's answers.
fn decide(
    ev: &NormalisedEvent,
    key: &IdempotencyKey,
    fp: &payhook::domain::Fingerprint,
    s: &Stored,
) -> bool {
    let EventKind::PaymentSucceeded(p) = &ev.kind else {
        return false;
    };
    let claim = judge_existing(
        &s.claim,
        fp,
        NOW_S * 1_000,
        &payhook::idempotency::OwnerToken::from_stored("bench".into()),
    );
    let paid = judge_paid(Some(s.payment.clone()), p, key, false);
    black_box(&claim);
    black_box(&paid);
    true
}

fn answer(ev: &NormalisedEvent, key: &IdempotencyKey) -> String {
    let EventKind::PaymentSucceeded(p) = &ev.kind else {
        return String::new();
    };
    let account = p.account.as_ref().map_or("", |a| a.as_str());
    serde_json::to_string(&Applied::payment(key, p, account)).unwrap_or_default()
}

fn emf() -> String {
    emf_line(
        ProviderId::GENERIC,
        Disposition::Processed {
            outcome: Outcome::Applied,
            took_over: false,
        },
        NOW_S * 1_000,
        Some("8f7e2b1c-0000-4000-8000-000000000000"),
    )
}

fn handler(c: &mut Criterion) {
    let scheme = StandardWebhooks::from_env_value(SECRET, 300).unwrap();
    let generic = Generic {
        scheme: scheme.clone(),
    };
    let headers = headers(&scheme);
    let body = BODY.as_bytes();
    let ev = generic.normalise(body).unwrap();
    let key = ev.key().unwrap();
    let fp = fingerprint(&ev);
    let stored = stored(&ev);
    generic.verify(&headers, body, NOW_S).unwrap();

    let mut g = c.benchmark_group("handler");
    g.bench_function("verify", |b| {
        b.iter(|| generic.verify(black_box(&headers), black_box(body), NOW_S))
    });
    g.bench_function("parse_normalise", |b| {
        b.iter(|| generic.normalise(black_box(body)))
    });
    g.bench_function("decide", |b| {
        b.iter(|| decide(black_box(&ev), &key, &fp, &stored))
    });
    g.bench_function("serialise_answer", |b| {
        b.iter(|| answer(black_box(&ev), &key))
    });
    g.bench_function("emf_line", |b| b.iter(emf));
    // Everything one delivery costs in CPU outside the SDK, in the order the handler does it.
    g.bench_function("total", |b| {
        b.iter(|| {
            generic
                .verify(black_box(&headers), black_box(body), NOW_S)
                .unwrap();
            let ev = generic.normalise(black_box(body)).unwrap();
            let key = ev.key().unwrap();
            let fp = fingerprint(&ev);
            decide(&ev, &key, &fp, &stored);
            let raw = String::from_utf8_lossy(body).into_owned();
            (answer(&ev, &key), emf(), raw)
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = handler }
criterion_main!(benches);
