//! Replay of stored deliveries and the queryable event log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeSet;

use common::*;
use payhook::domain::{AccountId, Currency, IdempotencyKey, PaymentStatus, ProviderId, Reference};
use payhook::dynamodb::DynamoStore;
use payhook::eventlog::{Delivery, EventLog, LogFilter, Outcome};
use payhook::ledger::Ledger;
use payhook::payments::Payments;
use payhook::pipeline::Pipeline;
use payhook::reconcile::invoke::{handle, Ops};
use payhook::reconcile::{HttpProviderApi, ReconcileSettings};
use payhook::replay::{replay, ReplayOptions, Summary};
use serde_json::json;

fn opts(dry_run: bool) -> ReplayOptions {
    ReplayOptions {
        dry_run,
        concurrency: 4,
        started_by: "test".into(),
        lease_ms: 30_000,
        include_replays: false,
        max: 10_000,
    }
}

async fn run(store: &DynamoStore, filter: &LogFilter, o: &ReplayOptions) -> Summary {
    let (providers, _) = config(30_000).providers();
    replay(
        &Pipeline::new(store.clone()),
        &providers,
        filter,
        o,
        |_, _| {},
    )
    .await
    .unwrap()
}

async fn balance(store: &DynamoStore, acct: &str) -> (i64, u64) {
    let b = store
        .balance(&AccountId::parse(acct).unwrap())
        .await
        .unwrap();
    (
        b.balances
            .get(&Currency::parse("NGN").unwrap())
            .copied()
            .unwrap_or(0),
        b.entries,
    )
}

async fn all_deliveries(store: &DynamoStore) -> Vec<Delivery> {
    store
        .query(&LogFilter::default(), 10_000, None)
        .await
        .unwrap()
        .deliveries
}

#[tokio::test]
async fn replaying_everything_twice_changes_nothing_and_is_logged() {
    // GIVEN a normal run: payments, duplicates, a refund, a state event, an ignored event
    let store = store("replay2x").await;
    let app = app(store.clone(), 30_000);
    let bodies = [
        payment_body("e1", "r1", "w_rep", 1_000, "NGN"),
        payment_body("e1", "r1", "w_rep", 1_000, "NGN"),
        payment_body("e2", "r2", "w_rep", 2_000, "NGN"),
        event_body(
            "e3",
            "refund.succeeded",
            json!({"reference": "rf1", "payment_reference": "r2", "amount": 500, "currency": "NGN"}),
        ),
        event_body("e4", "payment.processing", json!({"reference": "r3"})),
        event_body("e5", "customer.created", json!({})),
    ];
    for b in &bodies {
        assert_eq!(send(&app, signed(b)).await.status, 200);
    }
    let before = (
        balance(&store, "w_rep").await,
        all_deliveries(&store).await.len(),
    );
    assert_eq!(before, ((2_500, 3), 6));

    // WHEN every stored delivery is replayed, twice
    let first = run(&store, &LogFilter::default(), &opts(false)).await;
    let second = run(&store, &LogFilter::default(), &opts(false)).await;

    // THEN balances and entries are unchanged, and each replay attempt is itself logged
    assert_eq!(balance(&store, "w_rep").await, (2_500, 3));
    // (the duplicate of e1 has its key: a run drives a key once)
    assert_eq!(
        (first.selected, first.same_key, second.selected),
        (5, 1, 5),
        "replays of replays are not re-selected"
    );
    assert!(
        first.errors.is_empty() && second.errors.is_empty(),
        "{first:?} {second:?}"
    );
    assert_eq!(first.results.get("replayed"), Some(&3), "{first:?}");
    let log = all_deliveries(&store).await;
    assert_eq!(log.len(), 16);
    let replays: Vec<&Delivery> = log.iter().filter(|d| d.replay_of.is_some()).collect();
    assert_eq!(replays.len(), 10);
    assert!(replays
        .iter()
        .all(|d| d.started_by.as_deref() == Some("test")));
    let originals: BTreeSet<&str> = log
        .iter()
        .filter(|d| d.replay_of.is_none())
        .map(|d| d.id.as_str())
        .collect();
    assert!(replays
        .iter()
        .all(|d| originals.contains(&d.replay_of.as_ref().unwrap().as_str())));
}

#[tokio::test]
async fn a_parked_refund_replayed_after_its_payment_applies_once() {
    // GIVEN a refund that arrived before its payment (parked, 409, by the release that wrote
    // nothing on the payment, so its credit does not take it), then the payment
    let store = store("parked").await;
    let app = app(store.clone(), 30_000);
    let refund = event_body(
        "e_rf",
        "refund.succeeded",
        json!({"reference": "rf_p", "payment_reference": "r_p", "amount": 300, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&refund)).await.status, 409);
    as_parked_by_previous_release(&store, "generic", "r_p").await;
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_p", "r_p", "w_p", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    assert_eq!(balance(&store, "w_p").await, (1_000, 1));

    // WHEN the parked deliveries are replayed (twice)
    let parked = LogFilter {
        outcome: Some(Outcome::Parked),
        ..LogFilter::default()
    };
    let s1 = run(&store, &parked, &opts(false)).await;
    let s2 = run(&store, &parked, &opts(false)).await;

    // THEN the refund applied exactly once
    assert_eq!(s1.results.get("applied"), Some(&1), "{s1:?}");
    assert_eq!(s2.results.get("replayed"), Some(&1), "{s2:?}");
    assert_eq!(balance(&store, "w_p").await, (700, 2));
    let p = store
        .payment(ProviderId::GENERIC, &Reference::parse("r_p").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.status, PaymentStatus::PartiallyRefunded);
}

#[tokio::test]
async fn a_refund_parked_before_its_payment_is_taken_by_the_credit_before_it_posts() {
    // GIVEN a refund that arrived before its payment (parked, 409)
    let store = store("parked_taken").await;
    let app = app(store.clone(), 30_000);
    let refund = event_body(
        "e_rf",
        "refund.succeeded",
        json!({"reference": "rf_t", "payment_reference": "r_t", "amount": 300, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&refund)).await.status, 409);

    // WHEN the payment arrives
    let paid = send(
        &app,
        signed(&payment_body("e_t", "r_t", "w_t", 1_000, "NGN")),
    )
    .await;

    // THEN its credit took the refund first: the account never held the 300 the provider gave
    // back, and the debit was posted no later than the credit
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(balance(&store, "w_t").await, (700, 2));
    let entries = store
        .entries(&AccountId::parse("w_t").unwrap())
        .await
        .unwrap();
    let posted = |key: &str| {
        entries
            .iter()
            .find(|e| e.key.as_str() == key)
            .map(|e| e.posted_at_ms)
            .unwrap()
    };
    assert!(posted("generic:refund:rf_t") <= posted("generic:payment:r_t"));

    // WHEN the parked delivery is replayed, and the provider redelivers it
    let parked = LogFilter {
        outcome: Some(Outcome::Parked),
        ..LogFilter::default()
    };
    let replayed = run(&store, &parked, &opts(false)).await;
    let again = send(&app, signed(&refund)).await;

    // THEN both find it done: nothing moves again
    assert!(replayed.errors.is_empty(), "{replayed:?}");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(balance(&store, "w_t").await, (700, 2));
}

#[tokio::test]
async fn a_dry_run_says_what_would_happen_and_writes_nothing() {
    let store = store("dryrun").await;
    let app = app(store.clone(), 30_000);
    let refund = event_body(
        "e_rf",
        "refund.succeeded",
        json!({"reference": "rf_d", "payment_reference": "r_d", "amount": 300, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&refund)).await.status, 409);
    as_parked_by_previous_release(&store, "generic", "r_d").await;
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_d", "r_d", "w_d", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    let before = counts(&store).await;
    let s = run(&store, &LogFilter::default(), &opts(true)).await;
    assert_eq!(counts(&store).await, before, "a dry run wrote something");
    assert!(s.dry_run);
    assert_eq!(s.results.get("applied"), Some(&1), "{s:?}");
    assert_eq!(s.moves.get("w_d NGN"), Some(&-300), "{s:?}");
    assert_eq!(s.results.get("replayed"), Some(&1), "{s:?}");
    assert_eq!(balance(&store, "w_d").await, (1_000, 1));
}

fn synthetic(id_ms: i64, reference: &str, outcome: Outcome) -> Delivery {
    Delivery {
        id: Delivery::new_id(id_ms),
        provider: ProviderId::GENERIC,
        event_id: format!("evt_{id_ms}"),
        event_type: "payment.succeeded".into(),
        key: Some(IdempotencyKey::from_stored(format!(
            "generic:payment:{reference}"
        ))),
        reference: Some(Reference::parse(reference).unwrap()),
        outcome,
        http_status: 200,
        received_at_ms: id_ms,
        raw_body: Some("{}".into()),
        replay_of: None,
        started_by: None,
        redriven: None,
        details: Default::default(),
    }
}

/// Reads every page of a query with a small page size.
async fn pages(store: &DynamoStore, filter: &LogFilter, limit: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.query(filter, limit, cursor.as_deref()).await.unwrap();
        assert!(page.deliveries.len() <= limit);
        out.extend(page.deliveries);
        match page.next {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

#[tokio::test]
async fn time_range_and_outcome_filters_are_exact_across_pages_and_days() {
    // GIVEN 60 deliveries spread over five days, alternating outcomes and references
    let store = store("filters").await;
    let day = 86_400_000;
    let start = payhook::domain::now_ms() - 5 * day;
    let outcomes = [Outcome::Applied, Outcome::Replayed, Outcome::Failed];
    let mut all = Vec::new();
    for i in 0..60i64 {
        let d = synthetic(
            start + i * (day / 12) + 7,
            &format!("ref{}", i % 4),
            outcomes[(i % 3) as usize],
        );
        store.append(&d).await.unwrap();
        all.push(d);
    }
    let newest_first = |mut v: Vec<Delivery>| {
        v.sort_by(|a, b| b.id.cmp(&a.id));
        v.into_iter().map(|d| d.id).collect::<Vec<_>>()
    };
    let (since, until) = (start + day + 3, start + 3 * day + 11);

    // WHEN/THEN each filter, read 7 at a time, returns exactly the matching deliveries, newest first
    type Keep = Box<dyn Fn(&Delivery) -> bool>;
    let cases: Vec<(LogFilter, Keep)> = vec![
        (
            LogFilter {
                since_ms: Some(since),
                until_ms: Some(until),
                ..LogFilter::default()
            },
            Box::new(move |d: &Delivery| d.received_at_ms >= since && d.received_at_ms < until),
        ),
        (
            LogFilter {
                outcome: Some(Outcome::Failed),
                ..LogFilter::default()
            },
            Box::new(|d: &Delivery| d.outcome == Outcome::Failed),
        ),
        (
            LogFilter {
                outcome: Some(Outcome::Replayed),
                since_ms: Some(since),
                until_ms: Some(until),
                ..LogFilter::default()
            },
            Box::new(move |d: &Delivery| {
                d.outcome == Outcome::Replayed
                    && d.received_at_ms >= since
                    && d.received_at_ms < until
            }),
        ),
        (
            LogFilter {
                reference: Some(Reference::parse("ref2").unwrap()),
                ..LogFilter::default()
            },
            Box::new(|d: &Delivery| d.reference.as_ref().map(|r| r.as_str()) == Some("ref2")),
        ),
        (
            LogFilter {
                reference: Some(Reference::parse("ref1").unwrap()),
                outcome: Some(Outcome::Applied),
                ..LogFilter::default()
            },
            Box::new(|d: &Delivery| {
                d.reference.as_ref().map(|r| r.as_str()) == Some("ref1")
                    && d.outcome == Outcome::Applied
            }),
        ),
        (
            LogFilter {
                event_id: Some(all[17].event_id.clone()),
                ..LogFilter::default()
            },
            Box::new({
                let e = all[17].event_id.clone();
                move |d: &Delivery| d.event_id == e
            }),
        ),
    ];
    for (i, (filter, keep)) in cases.iter().enumerate() {
        let expected = newest_first(all.iter().filter(|d| keep(d)).cloned().collect());
        assert!(!expected.is_empty(), "case {i} selects nothing");
        let got: Vec<_> = pages(&store, filter, 7)
            .await
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(got, expected, "case {i}: {filter:?}");
    }
}

#[tokio::test]
async fn the_replay_lambda_invocation_replays_by_filter() {
    // GIVEN a parked refund and then its payment
    let store = store("invoke").await;
    let app = app(store.clone(), 30_000);
    let refund = event_body(
        "e_rf",
        "refund.succeeded",
        json!({"reference": "rf_i", "payment_reference": "r_i", "amount": 100, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&refund)).await.status, 409);
    as_parked_by_previous_release(&store, "generic", "r_i").await;
    assert_eq!(
        send(
            &app,
            signed(&payment_body("e_i", "r_i", "w_i", 1_000, "NGN"))
        )
        .await
        .status,
        200
    );
    let (providers, _) = config(30_000).providers();
    let ops = Ops {
        pipeline: Pipeline::new(store.clone()),
        providers,
        api: HttpProviderApi::new(Vec::new()).unwrap(),
        settings: ReconcileSettings::default(),
        metrics: payhook::metrics::MetricsSink::Off,
    };
    // WHEN the operations function is invoked with the sample's shape (the binary names the
    // caller `lambda:{request id}`)
    let dry = handle(
        &ops,
        json!({"action": "replay", "filter": {"outcome": "parked"}, "dry_run": true}),
        "lambda:req-1",
        None,
    )
    .await
    .unwrap();
    let real = handle(
        &ops,
        json!({"action": "replay", "filter": {"outcome": "parked"}}),
        "lambda:req-2",
        None,
    )
    .await
    .unwrap();
    // THEN the dry run predicts, the real one applies once, and the replay names its invocation
    assert_eq!(dry["results"]["applied"], 1, "{dry}");
    assert_eq!(real["results"]["applied"], 1, "{real}");
    assert_eq!(balance(&store, "w_i").await, (900, 2));
    let replays: Vec<Delivery> = all_deliveries(&store)
        .await
        .into_iter()
        .filter(|d| d.replay_of.is_some())
        .collect();
    assert_eq!(replays.len(), 1);
    assert_eq!(replays[0].started_by.as_deref(), Some("lambda:req-2"));
    assert!(handle(
        &ops,
        json!({"action": "replay", "filter": {"outcome": "nope"}}),
        "r",
        None
    )
    .await
    .is_err());
}

/// #33: a dry run runs the pipeline's own judges over a store that never writes, in the run's
/// order, so its outcomes and balance effect are what the confirmed run then does, outcome for
/// outcome (the old prediction said "apply" whenever no claim existed).
#[tokio::test]
async fn a_dry_run_and_the_confirmed_run_agree_on_every_outcome() {
    use payhook::domain::{ClaimedFacts, EventKind, Money, RefundFacts};
    use payhook::idempotency::Claims;
    // GIVEN deliveries whose replays meet each outcome
    let store = store("dry_agree").await;
    let app = app(store.clone(), 30_000);
    let pay = |e: &str, r: &str, amount: i64| payment_body(e, r, "w_e", amount, "NGN");
    let refund = |e: &str, rf: &str, r: &str, amount: i64| {
        let data =
            json!({"reference": rf, "payment_reference": r, "amount": amount, "currency": "NGN"});
        event_body(e, "refund.succeeded", data)
    };
    // replayed: an applied payment (its claim is DONE)
    assert_eq!(
        send(&app, signed(&pay("e_a", "r_a", 1_000))).await.status,
        200
    );
    // the same payment again with other money (a conflict; its key is r_a's)
    assert_eq!(
        send(&app, signed(&pay("e_a2", "r_a", 999))).await.status,
        422
    );
    // parked: a refund whose payment never arrives
    assert_eq!(
        send(&app, signed(&refund("e_p", "rf_p", "r_none", 300)))
            .await
            .status,
        409
    );
    // applied, then refused: two refunds of 300 parked before a payment of 500, written down
    // by the release before this one (its credit did not take them)
    for (e, rf) in [("e_c1", "rf_c1"), ("e_c2", "rf_c2")] {
        assert_eq!(
            send(&app, signed(&refund(e, rf, "r_c", 300))).await.status,
            409
        );
    }
    as_parked_by_previous_release(&store, "generic", "r_c").await;
    assert_eq!(
        send(&app, signed(&pay("e_c", "r_c", 500))).await.status,
        200
    );
    // unassigned: a payment naming no account
    let no_account = json!({"reference": "r_u", "amount": 700, "currency": "NGN"});
    let unassigned = event_body("e_u", "payment.succeeded", no_account);
    assert_eq!(send(&app, signed(&unassigned)).await.status, 200);
    // ignored: a type payhook does not act on
    let other = event_body("e_i", "customer.created", json!({"id": "cus_1"}));
    assert_eq!(send(&app, signed(&other)).await.status, 200);
    // in flight: a parked refund whose key someone holds right now
    assert_eq!(
        send(&app, signed(&refund("e_f", "rf_f", "r_none2", 100)))
            .await
            .status,
        409
    );
    let held = EventKind::RefundSucceeded(RefundFacts {
        refund_reference: Reference::parse("rf_f").unwrap(),
        payment_reference: Reference::parse("r_none2").unwrap(),
        money: Money::new(100, Currency::parse("NGN").unwrap()).unwrap(),
    });
    let key = IdempotencyKey::from_stored("generic:refund:rf_f".into());
    let fingerprint = ClaimedFacts::of(&held).unwrap().fingerprint();
    store.claim(&key, &fingerprint, 600_000).await.unwrap();
    let balance_before = balance(&store, "w_e").await.0;

    // WHEN the whole log is replayed dry, then for real
    let before = counts(&store).await;
    let dry = run(&store, &LogFilter::default(), &opts(true)).await;
    assert_eq!(counts(&store).await, before, "a dry run wrote something");
    let real = run(&store, &LogFilter::default(), &opts(false)).await;

    // THEN they agree outcome for outcome, and on the money
    let expected: std::collections::BTreeMap<String, usize> = [
        ("replayed", 2), // r_a's payment and r_c's payment
        ("conflict", 1), // rf_c2: past r_c's remainder once rf_c1 applied
        ("parked", 1),
        ("applied", 1),
        ("unassigned", 1),
        ("ignored", 1),
        ("in_flight", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // r_a's second delivery (other money) has the first one's key: driven once per run
    assert_eq!((dry.same_key, real.same_key), (1, 1));
    assert_eq!(dry.results, expected, "{dry:?}");
    assert_eq!(real.results, expected, "{real:?}");
    assert_eq!(dry.moves.get("w_e NGN"), Some(&-300), "{dry:?}");
    assert_eq!(balance(&store, "w_e").await.0, balance_before - 300);
}

/// #33 item 7: counts per outcome and minute come from rollups of closed minutes (stored once,
/// then read instead of walking the log), plus a walk of the open tail and a window's partial
/// edges: exact, whatever part of the window is closed.
#[tokio::test]
async fn tallies_are_exact_and_closed_minutes_are_read_from_their_rollups() {
    use payhook::read::{tally, CLOSED_AFTER_MS};
    // GIVEN 300 deliveries over the last 3 hours (some in closed minutes, some still open)
    let store = store("tally").await;
    let now = payhook::domain::now_ms();
    let start = now - 3 * 3_600_000;
    let outcomes = [Outcome::Applied, Outcome::Replayed, Outcome::Parked];
    let mut all = Vec::new();
    for i in 0..300i64 {
        let d = synthetic(
            start + i * 36_000 + 13,
            &format!("t{}", i % 7),
            outcomes[(i % 3) as usize],
        );
        store.append(&d).await.unwrap();
        all.push(d);
    }
    let expect = |since: i64, until: i64| {
        let mut m = std::collections::BTreeMap::<String, u64>::new();
        for d in all
            .iter()
            .filter(|d| d.received_at_ms >= since && d.received_at_ms < until)
        {
            *m.entry(d.outcome.to_string()).or_default() += 1;
        }
        m
    };
    // WHEN windows with partial edges are tallied, twice
    for (since, until) in [
        (start + 1_234, now + 1),
        (start + 3_600_000 + 59_999, now - 600_000),
    ] {
        let first = tally(&store, since, until, now).await.unwrap();
        let second = tally(&store, since, until, now).await.unwrap();
        // THEN both are exact
        assert!(first.complete && second.complete);
        assert_eq!(first.by_outcome(None), expect(since, until));
        assert_eq!(second, first);
    }
    // AND closed minutes were stored: a delivery written into one afterwards (which the
    // closing horizon says cannot happen) is not seen, so the count came from the rollup
    let closed = start + 10 * 60_000 + 5;
    assert!(closed < now - CLOSED_AFTER_MS);
    store
        .append(&synthetic(closed, "late", Outcome::Applied))
        .await
        .unwrap();
    let again = tally(&store, start, now + 1, now).await.unwrap();
    assert_eq!(again.by_outcome(None), expect(start, now + 1));
    // AND with a small walk budget on fresh tables, each call stores what it fully counted and
    // says it is not complete, until the stored minutes carry it to the exact count
    let fresh = store_for_tally_budget(&all).await;
    let mut calls = 0;
    let counted = loop {
        calls += 1;
        let t = payhook::read::tally_within(&fresh, start, now + 1, now, 40)
            .await
            .unwrap();
        assert!(calls < 30, "never completes");
        if t.complete {
            break t;
        }
        assert!(t.by_outcome(None).values().sum::<u64>() <= 300);
    };
    assert!(calls > 1);
    assert_eq!(counted.by_outcome(None), expect(start, now + 1));
    // AND warming stores every closed minute's rollups of both kinds, so no page walks them
    let warmed = store_for_tally_budget(&all).await;
    let (providers, _) = config(30_000).providers();
    let window = (start, now + 1, now);
    assert!(payhook::read::warm_rollups(&warmed, &providers, window, 5)
        .await
        .unwrap());
    let first = (start / 60_000 + 1) * 60_000;
    let closed_end = (now - CLOSED_AFTER_MS) / 60_000 * 60_000;
    let minutes = usize::try_from((closed_end - first) / 60_000).unwrap();
    for kind in [
        payhook::eventlog::RollupKind::Deliveries,
        payhook::eventlog::RollupKind::Money,
    ] {
        let stored = warmed.rollups(kind, first, closed_end).await.unwrap();
        assert_eq!(stored.len(), minutes, "{kind:?}");
    }
    // AND a provider filter counts only that provider's
    assert_eq!(
        again.by_outcome(Some(ProviderId::STRIPE)),
        std::collections::BTreeMap::new()
    );
}

async fn store_for_tally_budget(all: &[Delivery]) -> DynamoStore {
    let fresh = store("tally_budget").await;
    for d in all {
        fresh.append(d).await.unwrap();
    }
    fresh
}

#[tokio::test]
async fn pages_are_exact_when_each_shard_of_a_day_holds_many() {
    // GIVEN 400 deliveries within one hour (a dozen per index shard), a third of them failed
    let store = store("dense_pages").await;
    let start = payhook::domain::now_ms() - 3_600_000;
    let mut all = Vec::new();
    for i in 0..400i64 {
        let outcome = if i % 3 == 0 {
            Outcome::Failed
        } else {
            Outcome::Applied
        };
        let d = synthetic(start + i * 8_000 + (i * 7919) % 5_000, "dense", outcome);
        all.push(d);
    }
    let appends = all.iter().map(|d| store.append(d));
    futures::future::try_join_all(appends).await.unwrap();
    let newest_first = |mut v: Vec<Delivery>| {
        v.sort_by(|a, b| b.id.cmp(&a.id));
        v.into_iter().map(|d| d.id).collect::<Vec<_>>()
    };
    let window = LogFilter {
        since_ms: Some(start - 1),
        until_ms: Some(start + 3_600_000),
        ..LogFilter::default()
    };
    let failed = LogFilter {
        outcome: Some(Outcome::Failed),
        ..window.clone()
    };
    // WHEN every page is read, at several page sizes
    for limit in [1, 7, 50, 101, 500] {
        // THEN the pages hold exactly every delivery, newest first, none twice
        let got: Vec<_> = pages(&store, &window, limit)
            .await
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(got, newest_first(all.clone()), "limit {limit}");
        let got: Vec<_> = pages(&store, &failed, limit)
            .await
            .into_iter()
            .map(|d| d.id)
            .collect();
        let want = newest_first(
            all.iter()
                .filter(|d| d.outcome == Outcome::Failed)
                .cloned()
                .collect(),
        );
        assert_eq!(got, want, "failed, limit {limit}");
    }
}

/// #33: the attention page skips whole closed days that hold none of an outcome, from each
/// day's totals, stored once as the sum of its 1,440 stored minutes.
#[tokio::test]
async fn a_closed_day_s_totals_are_the_sum_of_its_minutes_and_only_whole_days_have_them() {
    use payhook::read::{day_totals, first_possible, tally};
    // GIVEN deliveries three days ago (applied only) and two days ago (applied and parked)
    let store = store("day_totals").await;
    let now = payhook::domain::now_ms();
    let day = 86_400_000;
    let d3 = (now / day - 3) * day;
    let d2 = d3 + day;
    let mut all = Vec::new();
    for i in 0..48i64 {
        let (at, outcome) = if i < 24 {
            (d3 + i * 3_600_000 + 17, Outcome::Applied)
        } else if i % 2 == 0 {
            (d2 + (i - 24) * 3_600_000 + 17, Outcome::Parked)
        } else {
            (d2 + (i - 24) * 3_600_000 + 17, Outcome::Applied)
        };
        let d = synthetic(at, &format!("day{i}"), outcome);
        store.append(&d).await.unwrap();
        all.push(d);
    }
    // WHEN nothing has stored the days' minutes yet
    let before = day_totals(&store, d3, now).await.unwrap();
    // THEN no day has totals: unknown is never read as empty
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(first_possible(&before, Outcome::Parked, d3), d3);

    // WHEN the two days are tallied (storing their minutes), then totalled
    assert!(tally(&store, d3, d2 + day, now).await.unwrap().complete);
    let totals = day_totals(&store, d3, now).await.unwrap();
    // THEN each whole day's totals are its deliveries, by provider and outcome
    assert_eq!(totals[&d3].get("generic#applied"), Some(&24));
    assert_eq!(totals[&d3].get("generic#parked"), None);
    assert_eq!(totals[&d2].get("generic#parked"), Some(&12));
    assert_eq!(totals[&d2].get("generic#applied"), Some(&12));
    // AND yesterday and today (minutes not stored) have none
    assert_eq!(totals.len(), 2, "{:?}", totals.keys());
    // AND a page of parked deliveries starts at two days ago; of failed ones, after both days
    assert_eq!(first_possible(&totals, Outcome::Parked, d3 + 5), d2);
    assert_eq!(first_possible(&totals, Outcome::Failed, d3 + 5), d2 + day);
    // AND the totals are stored: a delivery written into a closed day afterwards (which the
    // closing horizon says cannot happen) does not change them
    store
        .append(&synthetic(d3 + 60_000, "late", Outcome::Failed))
        .await
        .unwrap();
    let again = day_totals(&store, d3, now).await.unwrap();
    assert_eq!(again, totals);
}
