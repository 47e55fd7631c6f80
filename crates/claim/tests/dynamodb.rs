//! Each documented behaviour of the crate against a real DynamoDB API: dynalite (started by the
//! workspace's test command, or here from its `scripts/dynalite.js`), or DynamoDB Local / AWS in
//! `AWS_ENDPOINT_URL_DYNAMODB`. Each test its own uniquely named table.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dynamo_claim::{
    Answer, ClaimState, ClaimTable, Deadline, Error, Failed, Idempotency, IdempotencyLayer,
};
use serde::{Deserialize, Serialize};
use support::{client, table};

/// A number no other order of this process has (each order's trace differs).
static TRACES: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    order_id: String,
    amount_minor: i64,
    trace: String,
}

fn order(id: &str, amount_minor: i64) -> Order {
    Order {
        order_id: id.into(),
        amount_minor,
        trace: format!("trace-{}", TRACES.fetch_add(1, Ordering::Relaxed)),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    charge: String,
    amount_minor: i64,
}

/// A handler that counts its effects (the charges a real one would make).
fn charger(
    charges: &Arc<AtomicUsize>,
    o: &Order,
) -> impl std::future::Future<Output = Result<Receipt, Failed<String>>> {
    let charges = Arc::clone(charges);
    let amount_minor = o.amount_minor;
    async move {
        let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Receipt {
            charge: format!("ch_{n}"),
            amount_minor,
        })
    }
}

fn orders(table: ClaimTable) -> Idempotency<Order> {
    Idempotency::key_path(table, "/order_id").validate_path("/amount_minor")
}

#[tokio::test]
async fn the_first_call_runs_and_every_duplicate_gets_its_stored_value() {
    // GIVEN an order keyed by its id
    let table = table("replay").await;
    let once = orders(table.clone());
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_1", 500);
    // WHEN it is delivered three times (a later delivery with another trace id)
    let first = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    let again = order("ord_1", 500);
    let second = once
        .run(&again, None, |_| charger(&charges, &again))
        .await
        .unwrap();
    let third = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    // THEN one charge, and both duplicates answer its receipt
    let receipt = Receipt {
        charge: "ch_1".into(),
        amount_minor: 500,
    };
    assert_eq!(first, Answer::Ran(receipt.clone()));
    assert_eq!(second, Answer::Replayed(receipt.clone()));
    assert_eq!(third, Answer::Replayed(receipt.clone()));
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    // AND the stored answer is the value's JSON, byte for byte
    let stored = table.get("ord_1").await.unwrap().unwrap();
    let ClaimState::Done(answer) = stored.state else {
        panic!("not done: {stored:?}")
    };
    assert_eq!(answer.body, serde_json::to_string(&receipt).unwrap());
}

#[tokio::test]
async fn the_same_key_with_another_payload_is_a_conflict_never_a_replay() {
    let table = table("conflict").await;
    let once = orders(table);
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_2", 500);
    once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    let other = order("ord_2", 90_000);
    let answer = once
        .run(&other, None, |_| charger(&charges, &other))
        .await
        .unwrap();
    assert_eq!(answer, Answer::Conflict);
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_duplicates_are_in_progress_values_and_one_runs() {
    // GIVEN a first call whose handler holds until every duplicate has answered
    let table = table("concurrent").await;
    let once = orders(table);
    let charges = Arc::new(AtomicUsize::new(0));
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let o = order("ord_3", 700);
    let first = {
        let (once, o, charges) = (once.clone(), o.clone(), Arc::clone(&charges));
        tokio::spawn(async move {
            let effect = charger(&charges, &o);
            once.run(&o, None, |_| async move {
                started_tx.send(()).unwrap();
                held.await.unwrap();
                effect.await
            })
            .await
        })
    };
    started.await.unwrap();
    // WHEN eight duplicates arrive while it runs
    let duplicates = (0..8).map(|_| {
        let (once, o, charges) = (once.clone(), o.clone(), Arc::clone(&charges));
        tokio::spawn(async move { once.run(&o, None, |_| charger(&charges, &o)).await })
    });
    let answers = futures_join(duplicates).await;
    release.send(()).unwrap();
    // THEN each is an in-progress value (not an error), and one charge is made
    for answer in answers {
        assert!(
            matches!(answer, Ok(Answer::InProgress { retry_after_ms }) if retry_after_ms > 0),
            "{answer:?}"
        );
    }
    assert!(matches!(first.await.unwrap(), Ok(Answer::Ran(_))));
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

async fn futures_join<T: Send + 'static>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_failure_before_any_effect_releases_and_an_unknown_one_keeps_the_claim() {
    let table = table("failures").await;
    let once = orders(table.clone()).lease_ms(60_000);
    let charges = Arc::new(AtomicUsize::new(0));
    // Before: released, so the retry runs afresh.
    let o = order("ord_4", 100);
    let failed = once
        .run(&o, None, |_| async {
            Err::<Receipt, _>(Failed::Before("card declined before the call".to_owned()))
        })
        .await;
    assert!(matches!(failed, Err(Error::Handler(_))));
    assert!(table.get("ord_4").await.unwrap().is_none(), "released");
    let retried = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    assert!(matches!(retried, Answer::Ran(_)));
    // Unknown: the claim stays, so a retry does not charge again while the lease lives.
    let u = order("ord_5", 100);
    let failed = once
        .run(&u, None, |_| async {
            Err::<Receipt, _>(Failed::Unknown("the charge call timed out".to_owned()))
        })
        .await;
    assert!(matches!(failed, Err(Error::Handler(_))));
    let retried = once.run(&u, None, |_| charger(&charges, &u)).await.unwrap();
    assert!(matches!(retried, Answer::InProgress { .. }), "{retried:?}");
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "only ord_4's retry charged"
    );
    assert!(matches!(
        table.get("ord_5").await.unwrap().unwrap().state,
        ClaimState::InProgress { .. }
    ));
}

#[tokio::test]
async fn after_the_lease_a_retry_takes_over_and_knows_it() {
    let table = table("takeover").await;
    let once = orders(table).lease_ms(1);
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_6", 100);
    let _ = once
        .run(&o, None, |_| async {
            Err::<Receipt, _>(Failed::Unknown("crashed half way".to_owned()))
        })
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut told = None;
    let answer = once
        .run(&o, None, |attempt| {
            told = Some(attempt.took_over);
            charger(&charges, &o)
        })
        .await
        .unwrap();
    assert!(matches!(answer, Answer::Ran(_)));
    assert_eq!(
        told,
        Some(true),
        "the successor is told an attempt came before"
    );
}

#[tokio::test]
async fn a_zombie_cannot_overwrite_its_successors_answer() {
    // GIVEN a first attempt whose lease ran out while it was still working
    let table = table("fencing").await;
    let once = orders(table.clone()).lease_ms(1);
    let o = order("ord_7", 100);
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let zombie = {
        let (once, o) = (once.clone(), o.clone());
        tokio::spawn(async move {
            once.run(&o, None, |_| async move {
                started_tx.send(()).unwrap();
                held.await.unwrap();
                Ok::<_, Failed<String>>("zombie".to_owned())
            })
            .await
        })
    };
    started.await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // WHEN a successor takes over and finishes, and then the zombie finishes
    let successor = once
        .run(&o, None, |_| async {
            Ok::<_, Failed<String>>("successor".to_owned())
        })
        .await
        .unwrap();
    release.send(()).unwrap();
    let zombie = zombie.await.unwrap().unwrap();
    // THEN the successor's answer stands, and the zombie is told it
    assert_eq!(successor, Answer::Ran("successor".to_owned()));
    assert_eq!(zombie, Answer::Replayed("successor".to_owned()));
    let ClaimState::Done(stored) = table.get("ord_7").await.unwrap().unwrap().state else {
        panic!("not done")
    };
    assert_eq!(stored.body, "\"successor\"");
}

#[tokio::test]
async fn the_lease_ends_with_the_invocations_deadline() {
    let table = table("deadline").await;
    let once = orders(table.clone()).lease_ms(600_000);
    let o = order("ord_8", 100);
    let mut lease = None;
    once.run(&o, Some(Deadline::in_ms(5_000)), |_| async {
        let claim = table.get("ord_8").await.unwrap().unwrap();
        if let ClaimState::InProgress {
            lease_expires_at_ms,
            ..
        } = claim.state
        {
            lease = Some(lease_expires_at_ms - table.clock().now_ms());
        }
        Ok::<_, Failed<String>>(())
    })
    .await
    .unwrap();
    // 5 s of remaining time and five seconds' margin, not the 10 minutes given for no deadline.
    let lease = lease.unwrap();
    assert!((8_000..=11_500).contains(&lease), "lease {lease} ms");
    // A Lambda context's deadline is the same thing.
    let mut context = lambda_runtime::Context::default();
    context.deadline = u64::try_from(dynamo_claim::local_now_ms() + 2_000).unwrap();
    let from_context = Deadline::of(&context).unwrap().lease_ms();
    assert!((6_000..=7_500).contains(&from_context), "{from_context}");
    // A context without a deadline (zero) is no deadline: the configured lease is taken.
    assert_eq!(Deadline::of(&lambda_runtime::Context::default()), None);
}

#[tokio::test]
async fn the_local_cache_answers_a_warm_duplicate_without_the_table() {
    let table = table("cache").await;
    let cached = orders(table.clone()).local_cache(16);
    let uncached = orders(table.clone());
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_9", 100);
    cached
        .run(&o, None, |_| charger(&charges, &o))
        .await
        .unwrap();
    // The claim is gone from the table (as TTL would remove it): only the cache remembers.
    client()
        .delete_item()
        .table_name(table.name())
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("ord_9".into()),
        )
        .send()
        .await
        .unwrap();
    let warm = cached
        .run(&o, None, |_| charger(&charges, &o))
        .await
        .unwrap();
    assert!(matches!(warm, Answer::Replayed(_)), "{warm:?}");
    let other = order("ord_9", 999);
    let conflict = cached
        .run(&other, None, |_| charger(&charges, &other))
        .await
        .unwrap();
    assert_eq!(conflict, Answer::Conflict);
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    // Without the cache the table is asked, and it no longer knows the key.
    let cold = uncached
        .run(&o, None, |_| charger(&charges, &o))
        .await
        .unwrap();
    assert!(matches!(cold, Answer::Ran(_)));
}

#[tokio::test]
async fn an_event_without_a_key_never_runs_unguarded() {
    let table = table("nokey").await;
    let once = Idempotency::<Order>::key_path(table, "/customer_id");
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_10", 100);
    let answer = once.run(&o, None, |_| charger(&charges, &o)).await;
    assert!(matches!(answer, Err(Error::NoKey)));
    assert_eq!(charges.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_prefix_keeps_two_functions_apart_in_one_table() {
    let table = table("prefix").await;
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_11", 100);
    for prefix in ["charge", "email"] {
        let once = orders(table.clone()).prefix(prefix);
        let answer = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
        assert!(matches!(answer, Answer::Ran(_)), "{prefix}: {answer:?}");
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2);
    // The separator is the crate's: `email#ord_11`.
    assert!(table.get("email#ord_11").await.unwrap().is_some());
}

#[tokio::test]
async fn the_tower_layer_keeps_the_functions_output_and_makes_duplicates_lambda_errors() {
    use tower::{Layer, Service, ServiceExt};
    // GIVEN a handler behind the layer, told about its attempt
    let table = table("layer").await;
    let charges = Arc::new(AtomicUsize::new(0));
    let took_over = Arc::new(AtomicUsize::new(0));
    let inner = {
        let (charges, took_over) = (Arc::clone(&charges), Arc::clone(&took_over));
        tower::service_fn(move |a: dynamo_claim::Attempted<Order>| {
            let (charges, took_over) = (Arc::clone(&charges), Arc::clone(&took_over));
            async move {
                if a.attempt.took_over {
                    took_over.fetch_add(1, Ordering::SeqCst);
                }
                if a.event.payload.amount_minor < 0 {
                    return Err("refused".to_owned());
                }
                let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, String>(format!("ch_{n}"))
            }
        })
    };
    let mut service = IdempotencyLayer::new(orders(table)).layer(inner);
    let event = |o: Order, in_ms: i64| {
        let mut context = lambda_runtime::Context::default();
        context.deadline = u64::try_from(dynamo_claim::local_now_ms() + in_ms).unwrap();
        lambda_runtime::LambdaEvent::new(o, context)
    };

    // WHEN an order is delivered twice
    let o = order("ord_12", 100);
    let first = service
        .ready()
        .await
        .unwrap()
        .call(event(o.clone(), 30_000))
        .await;
    let second = service.ready().await.unwrap().call(event(o, 30_000)).await;

    // THEN the function's own output both times (not a wrapper), from one charge
    assert_eq!(first.unwrap(), "ch_1");
    assert_eq!(second.unwrap(), "ch_1");

    // WHEN a handler error keeps the claim and the retry comes within the invocation's time
    let bad = order("ord_13", -1);
    let failed = service
        .ready()
        .await
        .unwrap()
        .call(event(bad.clone(), 30_000))
        .await;
    assert!(matches!(failed, Err(Error::Handler(_))));
    let retried = service
        .ready()
        .await
        .unwrap()
        .call(event(bad.clone(), 30_000))
        .await;

    // THEN the duplicate is a Lambda error of its own type (SQS and async invocations retry
    // it), never a success that would delete the message
    let Err(e) = retried else {
        panic!("{retried:?}")
    };
    assert!(matches!(e, Error::InProgress { .. }), "{e:?}");
    let diagnostic = lambda_runtime::Diagnostic::from(e);
    assert_eq!(diagnostic.error_type, "Idempotency.InProgress");

    // AND another payload under a used key is a Conflict error
    let other = order("ord_12", 999);
    let conflict = service
        .ready()
        .await
        .unwrap()
        .call(event(other, 30_000))
        .await;
    let diagnostic = lambda_runtime::Diagnostic::from(conflict.unwrap_err());
    assert_eq!(diagnostic.error_type, "Idempotency.Conflict");
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(took_over.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_attempt_that_took_over_and_did_nothing_keeps_the_claim_for_the_next() {
    // GIVEN an attempt that may have charged (outcome unknown) and whose lease ran out
    let table = table("abandon").await;
    let once = orders(table.clone()).lease_ms(1);
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_14", 100);
    let _ = once
        .run(&o, None, |_| async {
            Err::<Receipt, _>(Failed::Unknown("the charge call timed out".to_owned()))
        })
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // WHEN the attempt that takes over fails before doing anything itself
    let failed = once
        .run(&o, None, |attempt| async move {
            assert!(attempt.took_over);
            Err::<Receipt, _>(Failed::Before("refused before any call".to_owned()))
        })
        .await;
    assert!(matches!(failed, Err(Error::Handler(_))));
    // THEN the claim stays (the first attempt's charge may exist), and the next attempt is told
    // an attempt came before: it is never a fresh run that skips looking
    assert!(matches!(
        table.get("ord_14").await.unwrap().unwrap().state,
        ClaimState::InProgress { .. }
    ));
    let mut told = None;
    let answer = once
        .run(&o, None, |attempt| {
            told = Some(attempt.took_over);
            charger(&charges, &o)
        })
        .await
        .unwrap();
    assert!(matches!(answer, Answer::Ran(_)));
    assert_eq!(told, Some(true));
}

#[tokio::test]
async fn a_map_in_the_payload_fingerprints_the_same_in_any_order() {
    // Two processes' HashMaps of the same headers iterate in different orders.
    #[derive(Serialize)]
    struct Delivery {
        id: String,
        headers: std::collections::HashMap<String, String>,
    }
    let table = table("canonical").await;
    let once = Idempotency::<Delivery>::key_path(table, "/id");
    let headers = |order: &[usize]| {
        let mut h = std::collections::HashMap::new();
        for i in order {
            h.insert(format!("x-header-{i}"), format!("value-{i}"));
        }
        h
    };
    let forward: Vec<usize> = (0..32).collect();
    let backward: Vec<usize> = (0..32).rev().collect();
    let first = Delivery {
        id: "d_1".into(),
        headers: headers(&forward),
    };
    let again = Delivery {
        id: "d_1".into(),
        headers: headers(&backward),
    };
    let ran = once
        .run(&first, None, |_| async { Ok::<_, Failed<String>>(1) })
        .await
        .unwrap();
    let replayed = once
        .run(&again, None, |_| async { Ok::<_, Failed<String>>(2) })
        .await
        .unwrap();
    assert_eq!((ran, replayed), (Answer::Ran(1), Answer::Replayed(1)));
}

// ------------------------------------------------------------------ limits, errors, switches

use dynamo_claim::{
    finalized_size, ClaimOutcome, FinalizeOutcome, Fingerprint, OwnerToken, Rejection, StoreError,
    StoredResponse, MAX_ITEM_BYTES, MAX_KEY_BYTES,
};

/// Claims `key` and finalizes it with a body of `body_len` bytes: what the table then holds.
async fn finalize_sized(table: &ClaimTable, key: &str, body_len: usize) -> ClaimState {
    let fp = Fingerprint::new("fp");
    let ClaimOutcome::Claimed { token, .. } = table.claim(key, &fp, 60_000).await.unwrap() else {
        panic!("not claimed")
    };
    let response = StoredResponse {
        status: 201,
        body: "b".repeat(body_len),
    };
    let done = table
        .finalize_with(key, &fp, &token, &response)
        .await
        .unwrap();
    assert_eq!(done, FinalizeOutcome::Done);
    table.get(key).await.unwrap().unwrap().state
}

#[tokio::test]
async fn an_answer_one_byte_under_at_and_over_the_item_limit_is_kept_kept_and_not_rerun() {
    // GIVEN the body length at which the finalized item is exactly DynamoDB's 400 KB
    let table = table("itemlimit").await;
    let empty = StoredResponse {
        status: 201,
        body: String::new(),
    };
    let token = OwnerToken::generate();
    let overhead = finalized_size("k-at", &Fingerprint::new("fp"), &token, &empty);
    let at = MAX_ITEM_BYTES - overhead;

    // WHEN answers 1 byte under, at, and 1 byte over it are finalized
    let under = finalize_sized(&table, "k-un", at - 1).await;
    let exact = finalize_sized(&table, "k-at", at).await;
    let over = finalize_sized(&table, "k-ov", at + 1).await;

    // THEN the first two are stored byte for byte, the third is DONE without its answer
    assert!(matches!(&under, ClaimState::Done(r) if r.body.len() == at - 1 && r.status == 201));
    assert!(matches!(&exact, ClaimState::Done(r) if r.body.len() == at));
    assert_eq!(over, ClaimState::DoneUnrecorded { status: 201 });
    // AND a duplicate of the over-limit one learns it happened: no claim, nothing to run
    let again = table
        .claim("k-ov", &Fingerprint::new("fp"), 60_000)
        .await
        .unwrap();
    assert_eq!(again, ClaimOutcome::ReplayUnrecorded { status: 201 });
}

#[tokio::test]
async fn a_plain_finalize_dynamodb_refuses_as_too_large_finishes_without_the_answer() {
    // GIVEN a claim finalized without its fingerprint, with an answer over 400 KB
    let table = table("refusedsize").await;
    let fp = Fingerprint::new("fp");
    let ClaimOutcome::Claimed { token, .. } = table.claim("k", &fp, 60_000).await.unwrap() else {
        panic!()
    };
    let big = StoredResponse {
        status: 200,
        body: "x".repeat(MAX_ITEM_BYTES + 1),
    };
    // WHEN DynamoDB refuses the write as too large
    let done = table.finalize("k", &token, &big).await.unwrap();
    // THEN the claim is finished anyway, and a duplicate is told so
    assert_eq!(done, FinalizeOutcome::Done);
    assert_eq!(
        table.claim("k", &fp, 60_000).await.unwrap(),
        ClaimOutcome::ReplayUnrecorded { status: 200 }
    );
}

#[tokio::test]
async fn a_600_kb_value_runs_once_however_often_it_is_retried_also_after_the_lease() {
    // GIVEN a handler whose value is 600 KB
    let table = table("bigvalue").await;
    let once = orders(table).lease_ms(1);
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_big", 100);
    let run = || {
        let charges = Arc::clone(&charges);
        async move {
            charges.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Failed<String>>("m".repeat(600 * 1024))
        }
    };
    // WHEN it runs, and is retried at once and after its 1 ms lease
    let first = once.run(&o, None, |_| run()).await.unwrap();
    let second = once.run(&o, None, |_| run()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let third = once.run(&o, None, |_| run()).await.unwrap();
    // THEN one charge; the duplicates are told it ran and its value was not kept
    assert!(matches!(first, Answer::Ran(ref v) if v.len() == 600 * 1024));
    assert_eq!(second, Answer::DoneUnrecorded);
    assert_eq!(third, Answer::DoneUnrecorded);
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn keys_one_byte_under_at_and_over_the_key_limit_are_stored_and_the_longer_hashed() {
    let table = table("keylimit").await;
    let fp = Fingerprint::new("fp");
    let key = |len: usize, last: char| format!("{}{last}", "k".repeat(len - 1));
    for len in [MAX_KEY_BYTES - 1, MAX_KEY_BYTES] {
        // GIVEN a key up to DynamoDB's 2,048 bytes: stored as it is
        let k = key(len, 'a');
        assert!(matches!(
            table.claim(&k, &fp, 60_000).await.unwrap(),
            ClaimOutcome::Claimed { .. }
        ));
        assert_eq!(table.get(&k).await.unwrap().unwrap().key, k);
    }
    // WHEN two keys over it share their first 2,048 bytes
    let (a, b) = (key(MAX_KEY_BYTES + 1, 'a'), key(MAX_KEY_BYTES + 1, 'b'));
    let claimed_a = table.claim(&a, &fp, 60_000).await.unwrap();
    let claimed_b = table.claim(&b, &fp, 60_000).await.unwrap();
    // THEN each is its own claim, stored under a readable prefix and its SHA-256
    assert!(
        matches!(claimed_a, ClaimOutcome::Claimed { .. }),
        "{claimed_a:?}"
    );
    assert!(
        matches!(claimed_b, ClaimOutcome::Claimed { .. }),
        "{claimed_b:?}"
    );
    let stored = table.get(&a).await.unwrap().unwrap().key;
    assert!(
        stored.starts_with(&"k".repeat(64)) && stored.contains("#sha256:"),
        "{stored}"
    );
    assert!(stored.len() < 200);
    // AND the same long key again finds its claim
    assert!(matches!(
        table.claim(&a, &fp, 60_000).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

#[tokio::test]
async fn an_empty_key_is_no_key_and_never_reaches_the_table() {
    let table = table("emptykey").await;
    let once = Idempotency::new(table.clone(), |_: &Order| Some(String::new()));
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_e", 1);
    let r = once.run(&o, None, |_| charger(&charges, &o)).await;
    assert!(matches!(r, Err(Error::NoKey)), "{r:?}");
    let direct = table.claim("", &Fingerprint::new("fp"), 1_000).await;
    assert!(matches!(
        direct,
        Err(StoreError::Rejected {
            why: Rejection::Invalid,
            ..
        })
    ));
    assert_eq!(charges.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn permanent_store_errors_are_not_retryable_and_an_outage_is() {
    // GIVEN a table that does not exist, and a store that does not answer
    let missing = ClaimTable::new(&client(), "claims-no-such-table");
    let down = ClaimTable::new(&support::client_at("http://127.0.0.1:9"), "claims");
    let fp = Fingerprint::new("fp");
    // WHEN each is asked for a claim
    let refused = missing.claim("k", &fp, 1_000).await.unwrap_err();
    let out = down.claim("k", &fp, 1_000).await.unwrap_err();
    // THEN the missing table is a refusal to fix, the outage one to retry
    assert!(
        matches!(
            refused,
            StoreError::Rejected {
                why: Rejection::NoTable,
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(!refused.is_retryable());
    assert!(matches!(out, StoreError::Unavailable { .. }), "{out:?}");
    assert!(out.is_retryable());
}

#[tokio::test]
async fn a_claim_that_vanished_under_a_finished_effect_is_written_back_and_never_rerun() {
    // GIVEN a handler during whose run its claim item is deleted (by hand, or TTL)
    let table = table("vanished").await;
    let once = orders(table.clone());
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_v", 100);
    let name = table.name().to_owned();
    let first = once
        .run(&o, None, |_| {
            let (charges, name) = (Arc::clone(&charges), name.clone());
            async move {
                client()
                    .delete_item()
                    .table_name(name)
                    .key(
                        "pk",
                        aws_sdk_dynamodb::types::AttributeValue::S("ord_v".into()),
                    )
                    .send()
                    .await
                    .unwrap();
                charges.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Failed<String>>(Receipt {
                    charge: "ch_1".into(),
                    amount_minor: 100,
                })
            }
        })
        .await
        .unwrap();
    // WHEN the order is delivered again
    let second = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    // THEN the first value stands and nothing ran twice
    assert!(matches!(first, Answer::Ran(ref r) if r.charge == "ch_1"));
    assert!(
        matches!(second, Answer::Replayed(ref r) if r.charge == "ch_1"),
        "{second:?}"
    );
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_claim_past_its_retention_is_absent_whatever_ttl_has_done() {
    // GIVEN claims kept 0 s (dynalite has no TTL: the item stays, as DynamoDB's may for days)
    let table = table("expiry").await.retention_s(0);
    let once = orders(table.clone());
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_x", 100);
    once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // WHEN it is read and delivered again past its retention
    let read = table.get("ord_x").await.unwrap();
    let again = once.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    // THEN it is absent, and the delivery is a new run
    assert!(read.is_none(), "{read:?}");
    assert!(matches!(again, Answer::Ran(_)), "{again:?}");
    assert_eq!(charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_kill_switch_runs_handlers_plainly_and_the_replay_hook_marks_replays() {
    let table = table("switches").await;
    let charges = Arc::new(AtomicUsize::new(0));
    let o = order("ord_s", 100);
    // GIVEN idempotency turned off: every call runs and nothing is claimed
    let off = orders(table.clone()).disabled(true);
    for _ in 0..2 {
        let a = off.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
        assert!(matches!(a, Answer::Ran(_)));
    }
    assert_eq!(charges.load(Ordering::SeqCst), 2);
    assert!(table.get("ord_s").await.unwrap().is_none());
    // GIVEN a replay hook: the replayed value is marked, the stored one is not
    let on = orders(table.clone()).on_replay(|v| v["charge"] = "replayed".into());
    let first = on.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    let second = on.run(&o, None, |_| charger(&charges, &o)).await.unwrap();
    assert!(matches!(first, Answer::Ran(ref r) if r.charge == "ch_3"));
    assert!(matches!(second, Answer::Replayed(ref r) if r.charge == "replayed"));
    assert_eq!(charges.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_api_gateway_retry_with_a_new_request_id_replays_and_another_body_conflicts() {
    let table = table("apigw").await;
    let once = Idempotency::key_path(table, "/headers/Idempotency-Key");
    let charges = Arc::new(AtomicUsize::new(0));
    let event = |request_id: &str, body: &str| {
        serde_json::json!({"httpMethod": "POST", "path": "/charges", "body": body,
            "headers": {"Idempotency-Key": "k1", "X-Amzn-Trace-Id": request_id},
            "requestContext": {"requestId": request_id, "requestTimeEpoch": 1_700_000_000_000_i64,
                               "stage": "prod"}})
    };
    let run = |e: serde_json::Value| {
        let charges = Arc::clone(&charges);
        let once = once.clone();
        async move {
            once.run(&e, None, |_| async move {
                charges.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Failed<String>>("ch".to_owned())
            })
            .await
            .unwrap()
        }
    };
    assert!(matches!(
        run(event("req-1", "{\"a\":1}")).await,
        Answer::Ran(_)
    ));
    assert!(matches!(
        run(event("req-2", "{\"a\":1}")).await,
        Answer::Replayed(_)
    ));
    assert_eq!(run(event("req-3", "{\"a\":2}")).await, Answer::Conflict);
    assert_eq!(charges.load(Ordering::SeqCst), 1);
}
