//! Scale, as structure: the capacity model (`payhook-tools capacity`) on a small scenario against
//! dynalite: no index key shared by every delivery, write units per delivery within targets,
//! indexes that never carry a body, and balance reads bounded by shards and recent entries, not
//! by history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use payhook::domain::{AccountId, Currency, IdempotencyKey, Reference};
use payhook::dynamodb::schema::ALL;
use payhook::dynamodb::DynamoStore;
use payhook::idempotency::{ClaimOutcome, Claims};
use payhook::ledger::{Layout, Ledger, Posting};
use payhook_tools::capacity::{classes, refund_classes, scenario, word_classes, Model};
use payhook_tools::recorder::{CapacityRecorder, Totals};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_shared_by_every_delivery_and_write_units_stay_within_targets() {
    // GIVEN the model over fresh tables with the production layout (32 index shards)
    let base = store("capacity").await;
    let mut model = Model::new(&base, &unique_prefix("capmodel"), &config(30_000), 11)
        .await
        .unwrap();

    // WHEN new deliveries and duplicates of 4 KB bodies, and a mixed scenario, run through it
    let per = classes(&mut model, 4_096, 6).await.unwrap();
    let small = classes(&mut model, 1_024, 4).await.unwrap();
    let refunds = refund_classes(&mut model, 4).await.unwrap();
    let words = word_classes(&mut model, 4).await.unwrap();
    let wide = scenario(&mut model, "wide", 10_000.0, 10_000, 0.3, 80)
        .await
        .unwrap();
    let hot = scenario(&mut model, "one account", 1_000.0, 1, 0.0, 40)
        .await
        .unwrap();

    // THEN a new 4 KB delivery costs at most 12 write units and a duplicate at most 5
    let (new, dup) = (&per[0], &per[1]);
    assert!(new.write_units <= 12.0, "new 4 KB: {new:?}");
    assert!(dup.write_units <= 5.0, "duplicate 4 KB: {dup:?}");
    // AND a new 1 KB delivery costs the 10 units docs/capacity.md itemises, a duplicate 5 (the
    // log item's details, #33, take a 1 KB body's item past one KB: one unit more than before)
    assert!(small[0].write_units <= 10.0, "new 1 KB: {:?}", small[0]);
    assert!(
        small[1].write_units <= 5.0,
        "duplicate 1 KB: {:?}",
        small[1]
    );
    // AND a new refund is its 4 writes (#44: its claim on its payment, no claims-table write)
    // at 10 units, its duplicate the failed refund write, dynalite's read and the log at 5
    let (new_refund, dup_refund) = (&refunds[0], &refunds[1]);
    let requests = |p: &payhook_tools::capacity::PerDelivery, op: &str| {
        p.requests.get(op).copied().unwrap_or(0.0)
    };
    assert_eq!(
        (
            requests(new_refund, "PutItem"),
            requests(new_refund, "UpdateItem")
        ),
        (2.0, 2.0),
        "{new_refund:?}"
    );
    assert!(new_refund.write_units <= 10.0, "{new_refund:?}");
    assert!(dup_refund.write_units <= 5.0, "{dup_refund:?}");
    // AND so are a reversal's and a withdrawal's (a withdrawal reads the balance besides, to
    // say so when it took it below zero), their duplicates at the refund's 5
    for (new, dup) in [(&refunds[2], &refunds[3]), (&refunds[4], &refunds[5])] {
        let writes = (requests(new, "PutItem"), requests(new, "UpdateItem"));
        assert_eq!(writes, (2.0, 2.0), "{new:?}");
        assert!(new.write_units <= 10.0, "{new:?}");
        assert!(dup.write_units <= 5.0, "{dup:?}");
        assert_eq!(requests(dup, "UpdateItem"), 1.0, "{dup:?}");
    }
    assert_eq!(requests(&refunds[2], "GetItem"), 0.0, "{:?}", refunds[2]);
    // AND a payout's settlement word is its read and its 4 writes (#44: its claim on its
    // payout; it was 3 PutItem, 2 UpdateItem and 2 GetItem with the claims table's), 9 units
    // (the payout's `open` index entry moves PAYOUT -> POSTING and goes: 3 of them), and its
    // duplicate the read and the log
    let (new_word, dup_word) = (&words[0], &words[1]);
    let calls = |p| {
        (
            requests(p, "UpdateItem"),
            requests(p, "GetItem"),
            requests(p, "PutItem"),
        )
    };
    assert_eq!(calls(new_word), (2.0, 1.0, 2.0), "{new_word:?}");
    assert_eq!(calls(dup_word), (0.0, 1.0, 1.0), "{dup_word:?}");
    assert!(new_word.write_units <= 9.0, "{new_word:?}");
    assert!(dup_word.write_units <= 3.0, "{dup_word:?}");
    // AND every key many deliveries write is one of a family spread over shards, each shard
    // well under DynamoDB's 1,000 write units/s at 10,000 deliveries/s and at 1,000 credits/s
    for s in [&wide, &hot] {
        assert!(s.within_key_limit, "{s:?}");
        for h in &s.hottest {
            assert!(
                h.keys_in_family >= 4,
                "{}: {} {} is not sharded",
                s.name,
                h.target,
                h.key
            );
        }
    }
    let layout = model.store.layout().await.unwrap();
    assert_eq!(layout.index_shards, Layout::DEFAULT_INDEX_SHARDS);
}

#[test]
fn indexes_never_project_a_body() {
    for table in ALL {
        for ix in table.indexes {
            assert!(
                !ix.projected
                    .iter()
                    .any(|a| *a == "raw_body" || *a == "body_z"),
                "{}/{}",
                table.role,
                ix.name
            );
        }
    }
}

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

async fn post(store: &DynamoStore, account: &AccountId, i: usize, at_ms: i64, amount: i64) {
    let key = IdempotencyKey::from_stored(format!("generic:payment:cp_{i}"));
    let posting = Posting {
        shard: Layout::default().place(&key),
        at_ms: Some(at_ms),
        key,
        account: account.clone(),
        currency: ngn(),
        amount_minor: amount,
        reference: Reference::parse(&format!("cp_{i}")).unwrap(),
        posted_at_ms: at_ms,
    };
    store.post(&posting).await.unwrap();
}

/// Read units of one balance read, costed from the items it returned.
async fn balance_read_units(base: &DynamoStore, account: &AccountId) -> (i64, u64, f64) {
    let recorder = CapacityRecorder::new(base.client().clone(), base.tables().clone());
    let recorded = store_with(base, sdk_builder().interceptor(recorder.clone()));
    let b = recorded.balance(account).await.unwrap();
    let units = Totals::of(&recorder.take()).read_units;
    (
        b.balances.get(&ngn()).copied().unwrap_or(0),
        b.entries,
        units,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_read_costs_shards_plus_recent_entries_not_history() {
    // GIVEN an account with 2,000 entries made ten minutes ago, and a claim in progress now
    let store = store("checkpoint").await;
    let acct = AccountId::parse("w_busy").unwrap();
    let old = payhook::domain::now_ms() - 600_000;
    for i in 0..2_000 {
        post(&store, &acct, i, old + i as i64, 10).await;
    }
    let key = IdempotencyKey::from_stored("generic:payment:in_flight".into());
    let ClaimOutcome::Claimed { .. } = store
        .claim(
            &key,
            &payhook::domain::Fingerprint::from_stored("{}".into()),
            60_000,
        )
        .await
        .unwrap()
    else {
        panic!("claim")
    };
    let claimed_at = payhook::domain::now_ms();

    // WHEN the balance is read twice (the first read finds many entries and rolls checkpoints)
    let (first, n1, units1) = balance_read_units(&store, &acct).await;
    let (second, n2, units2) = balance_read_units(&store, &acct).await;

    // THEN both are exact, and the second reads checkpoints instead of 2,000 entries
    assert_eq!((first, n1), (20_000, 2_000));
    assert_eq!((second, n2), (20_000, 2_000));
    assert!(
        units2 < 10.0,
        "second read: {units2} read units (first {units1})"
    );
    assert!(units1 > 5.0 * units2, "first {units1} vs second {units2}");

    // AND an entry of the claim in progress, posted late with its time from after the claim
    // was taken, is counted: the checkpoint stopped before the claim
    post(&store, &acct, 9_999, claimed_at + 1, 7).await;
    let (after, n3, _) = balance_read_units(&store, &acct).await;
    assert_eq!((after, n3), (20_007, 2_001));
}

/// The stored log items of one reference, oldest first.
async fn log_items(
    store: &DynamoStore,
    reference: &str,
) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let pk = format!("ref#generic#{reference}");
    let mut items: Vec<_> = scan(store, &store.tables().events)
        .await
        .into_iter()
        .filter(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&pk))
        .collect();
    items.sort_by_key(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned());
    items
}

fn attr_s<'a>(
    item: &'a std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
    name: &str,
) -> Option<&'a String> {
    item.get(name).and_then(|v| v.as_s().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_redelivery_points_at_the_body_it_repeats_and_never_loses_one() {
    use payhook::eventlog::{EventLog, LogFilter};
    // GIVEN a 64 KB payment body, applied once
    let store = store("sharedbody").await;
    let app = app(store.clone(), 30_000);
    let body = payhook_tools::capacity::body("evt_big", "pay_big", "w_big", 65_536);
    let first = send(&app, signed(&body)).await;
    assert_eq!(
        (first.status, first.replayed),
        (200, false),
        "{}",
        first.body
    );

    // WHEN the provider redelivers the same bytes
    let again = send(&app, signed(&body)).await;
    assert_eq!((again.status, again.replayed), (200, true));

    // THEN the redelivery's item holds no body of its own: it points at the first, and expires
    // no later than it
    let items = log_items(&store, "pay_big").await;
    assert_eq!(items.len(), 2);
    let first_id = attr_s(&items[0], "sk").unwrap().clone();
    assert!(items[0].contains_key("body_z"));
    assert!(!items[1].contains_key("body_z") && !items[1].contains_key("raw_body"));
    assert_eq!(attr_s(&items[1], "body_in"), Some(&first_id));
    let expires =
        |i: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>| {
            i.get("expires_at_s")
                .unwrap()
                .as_n()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        };
    assert!(expires(&items[1]) <= expires(&items[0]));
    // AND reading it back (as replay does) gives the exact bytes
    let filter = LogFilter {
        reference: Some(Reference::parse("pay_big").unwrap()),
        ..LogFilter::default()
    };
    let page = store.query(&filter, 10, None).await.unwrap();
    for d in &page.deliveries {
        let full = store.with_body(d).await.unwrap();
        assert_eq!(full.raw_body.as_deref(), Some(body.as_str()), "{}", d.id);
    }

    // GIVEN the first delivery's item is gone (its append never landed, or it expired)
    store
        .client()
        .delete_item()
        .table_name(&store.tables().events)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("ref#generic#pay_big".into()),
        )
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(first_id))
        .send()
        .await
        .unwrap();
    // WHEN the provider redelivers once more
    let third = send(&app, signed(&body)).await;
    assert_eq!((third.status, third.replayed), (200, true));
    // THEN that delivery stores the body itself rather than point at the one that went missing
    let items = log_items(&store, "pay_big").await;
    assert_eq!(items.len(), 2);
    assert!(
        items[1].contains_key("body_z"),
        "the newest stores its own body"
    );
}
