//! The change events, end to end as far as runs offline: deliveries go through the real router
//! against dynalite; every item change they make to the payments and ledger tables becomes a
//! DynamoDB stream record (diffing the tables before and after, in the stream view type
//! template.yaml declares); each EventBridge Pipe in template.yaml is applied to each record:
//! its filters (EventBridge pattern semantics, for the operators the template uses) and its
//! input transformer. The events that come out must be exactly the catalogue's
//! (docs/integration.md): one per movement or state change, none for duplicates, checkpoints
//! or the layout item, each `id` a stable, distinct dedup key.
//!
//! What this cannot show: that AWS evaluates the patterns and templates as this harness does
//! (checked against the documented semantics only), and delivery itself (streams, Pipes, bus).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use common::*;
use payhook::domain::{AccountId, Currency, Money, ProviderId, Reference};
use payhook::dynamodb::schema::ALL;
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::{Layout, Ledger};
use payhook::payments::{ExpectedPayment, Payments};
use payhook::payouts::calls::{CallKind, CallTicket, ProviderNote};
use payhook::payouts::WordOrigin;
use serde_json::{json, Value};

/// One pipe as template.yaml declares it.
struct Pipe {
    name: String,
    /// Schema role of the table whose stream it reads.
    table: &'static str,
    filters: Vec<Value>,
    detail_type: String,
    input_template: String,
}

fn tag_value(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::Tagged(t) => t.value.as_str().map(str::to_owned),
        _ => None,
    }
}

fn pipes() -> Vec<Pipe> {
    let text =
        std::fs::read_to_string(format!("{}/template.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    // Logical table id -> schema role, through the env var each table's name is passed in.
    let env = &doc["Globals"]["Function"]["Environment"]["Variables"];
    let role_of = |logical: &str| {
        ALL.iter()
            .find(|d| tag_value(&env[d.env_var]).as_deref() == Some(logical))
            .map(|d| d.role)
            .unwrap_or_else(|| panic!("{logical} is no table of schema.rs"))
    };
    let mut found = Vec::new();
    for (name, r) in doc["Resources"].as_mapping().unwrap() {
        if r["Type"].as_str() != Some("AWS::Pipes::Pipe") {
            continue;
        }
        let p = &r["Properties"];
        let source = tag_value(&p["Source"]).unwrap();
        let logical = source.strip_suffix(".StreamArn").unwrap();
        found.push(Pipe {
            name: name.as_str().unwrap().to_owned(),
            table: role_of(logical),
            filters: p["SourceParameters"]["FilterCriteria"]["Filters"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|f| serde_json::from_str(f["Pattern"].as_str().unwrap()).unwrap())
                .collect(),
            detail_type: p["TargetParameters"]["EventBridgeEventBusParameters"]["DetailType"]
                .as_str()
                .unwrap()
                .to_owned(),
            input_template: p["TargetParameters"]["InputTemplate"]
                .as_str()
                .unwrap()
                .to_owned(),
        });
    }
    assert!(!found.is_empty(), "template.yaml has no pipes");
    found
}

// ------------------------------------------------------------------ EventBridge pattern semantics

/// One rule of a pattern's value list against the record's value (None: absent).
fn rule_matches(rule: &Value, value: Option<&Value>) -> bool {
    match rule {
        Value::Object(op) => {
            let (name, arg) = op.iter().next().unwrap();
            match name.as_str() {
                "anything-but" => {
                    let Some(v) = value else { return false };
                    match arg {
                        Value::Array(xs) => !xs.contains(v),
                        x => x != v,
                    }
                }
                "prefix" => value.and_then(Value::as_str).is_some_and(|s| s.starts_with(arg.as_str().unwrap())),
                "exists" => value.is_some() == arg.as_bool().unwrap(),
                other => panic!("pattern operator {other} is not modelled here: add it before using it in template.yaml"),
            }
        }
        literal => value == Some(literal),
    }
}

fn pattern_matches(pattern: &Value, record: &Value) -> bool {
    pattern.as_object().unwrap().iter().all(|(k, p)| {
        let v = record.get(k);
        match p {
            Value::Array(rules) => rules.iter().any(|r| rule_matches(r, v)),
            Value::Object(_) => v.is_some_and(|v| v.is_object() && pattern_matches(p, v)),
            other => panic!("pattern value {other} must be a list or an object"),
        }
    })
}

/// The input transformer: every `<$.path>` replaced by the (string) value at that path, which
/// must exist; the result must be JSON.
fn transform(template: &str, record: &Value) -> Value {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("<$.") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('>').unwrap();
        let path = &rest[start + 3..end];
        let mut v = record;
        for part in path.split('.') {
            v = v
                .get(part)
                .unwrap_or_else(|| panic!("<$.{path}>: no {part} in the record {record}"));
        }
        out.push_str(
            v.as_str()
                .unwrap_or_else(|| panic!("<$.{path}> is not a string: {v}")),
        );
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("the transformed event is not JSON ({e}): {out}"))
}

// ------------------------------------------------------------------ stream records from the tables

fn ddb_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::Ss(xs) => json!({"SS": xs}),
        AttributeValue::Ns(xs) => json!({"NS": xs}),
        AttributeValue::B(b) => {
            json!({"B": base64::engine::general_purpose::STANDARD.encode(b.as_ref())})
        }
        AttributeValue::L(xs) => json!({"L": xs.iter().map(ddb_json).collect::<Vec<_>>()}),
        AttributeValue::M(m) => {
            json!({"M": m.iter().map(|(k, v)| (k.clone(), ddb_json(v))).collect::<serde_json::Map<_, _>>()})
        }
        other => panic!("attribute type {other:?} not modelled"),
    }
}

fn image(item: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(item.iter().map(|(k, v)| (k.clone(), ddb_json(v))).collect())
}

type Snapshot = BTreeMap<String, BTreeMap<String, Value>>;

async fn snapshot(store: &DynamoStore) -> Snapshot {
    let mut snap = Snapshot::new();
    for def in ALL.iter().filter(|d| d.stream.is_some()) {
        let table = store.tables().name_of(def).to_owned();
        let items = scan(store, &table).await;
        let by_key = items
            .iter()
            .map(|i| {
                let key = format!(
                    "{}|{}",
                    i["pk"].as_s().unwrap(),
                    i.get("sk").map_or("", |v| v.as_s().unwrap())
                );
                (key, image(i))
            })
            .collect();
        snap.insert(def.role.to_owned(), by_key);
    }
    snap
}

/// The stream records between two snapshots, per table role, as DynamoDB Streams shapes them
/// for the table's view type.
fn records(before: &Snapshot, after: &Snapshot, seq: &mut u64) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    for def in ALL.iter().filter(|d| d.stream.is_some()) {
        let old_too = def.stream == Some("NEW_AND_OLD_IMAGES");
        let (b, a) = (&before[def.role], &after[def.role]);
        for (key, new) in a {
            let old = b.get(key);
            if old == Some(new) {
                continue;
            }
            *seq += 1;
            let mut dynamodb = json!({"NewImage": new, "SequenceNumber": seq.to_string(), "StreamViewType": def.stream});
            if let (true, Some(old)) = (old_too, old) {
                dynamodb["OldImage"] = old.clone();
            }
            let name = if old.is_some() { "MODIFY" } else { "INSERT" };
            out.push((def.role, json!({"eventID": seq.to_string(), "eventName": name, "eventSource": "aws:dynamodb", "dynamodb": dynamodb})));
        }
        assert!(
            b.keys().all(|k| a.contains_key(k)),
            "{}: an item was deleted",
            def.role
        );
    }
    out
}

/// Every event the pipes put on the bus for these records: (detail type, detail).
fn events(pipes: &[Pipe], records: &[(&'static str, Value)]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (table, record) in records {
        for pipe in pipes.iter().filter(|p| p.table == *table) {
            if pipe.filters.iter().any(|f| pattern_matches(f, record)) {
                let detail = transform(&pipe.input_template, record);
                assert_eq!(detail["type"], pipe.detail_type.as_str(), "{}", pipe.name);
                // A redelivered record (streams are at least once) gives the same id.
                assert_eq!(transform(&pipe.input_template, record)["id"], detail["id"]);
                out.push((pipe.detail_type.clone(), detail));
            }
        }
    }
    out
}

struct Harness {
    store: DynamoStore,
    app: Arc<App<DynamoStore>>,
    pipes: Vec<Pipe>,
    snap: Snapshot,
    seq: u64,
    ids: Vec<String>,
}

impl Harness {
    /// Runs `step`, and returns the events its writes produce as (type, id) plus the details.
    async fn step(&mut self, step: impl std::future::Future<Output = ()>) -> Vec<(String, Value)> {
        step.await;
        let after = snapshot(&self.store).await;
        let recs = records(&self.snap, &after, &mut self.seq);
        self.snap = after;
        let evs = events(&self.pipes, &recs);
        self.ids.extend(
            evs.iter()
                .map(|(_, d)| d["id"].as_str().unwrap().to_owned()),
        );
        evs
    }

    async fn deliver(&mut self, body: String) -> Vec<(String, Value)> {
        let app = self.app.clone();
        self.step(async move {
            let r = send(&app, signed(&body)).await;
            assert_eq!(r.status, 200, "{}", r.body);
        })
        .await
    }
}

fn kinds(evs: &[(String, Value)]) -> Vec<(&str, &str)> {
    evs.iter()
        .map(|(t, d)| (t.as_str(), d["id"].as_str().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_movement_and_state_change_becomes_one_event_with_a_stable_id() {
    let store = store("change_events").await;
    let app = app(store.clone(), 30_000);
    let snap = snapshot(&store).await;
    let mut h = Harness {
        store: store.clone(),
        app,
        pipes: pipes(),
        snap,
        seq: 0,
        ids: Vec::new(),
    };
    let refund = |id: &str, rf: &str, amount: i64, kind: &str| {
        event_body(
            id,
            kind,
            json!({"reference": rf, "payment_reference": "pay_1", "amount": amount, "currency": "NGN"}),
        )
    };

    // GIVEN a registered payment: PENDING is the team's own doing, no event
    let expected = ExpectedPayment {
        provider: ProviderId::GENERIC,
        reference: Reference::parse("pay_1").unwrap(),
        account: AccountId::parse("wallet_42").unwrap(),
        money: Money::new(125_000, Currency::parse("NGN").unwrap()).unwrap(),
    };
    let s = store.clone();
    let evs = h
        .step(async move {
            s.register(&expected).await.unwrap();
        })
        .await;
    assert!(evs.is_empty(), "{evs:?}");

    // WHEN it is processing, then paid: one event each
    let evs = h
        .deliver(event_body(
            "e1",
            "payment.processing",
            json!({"reference": "pay_1"}),
        ))
        .await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0].0, "payhook.payment.processing");
    assert!(evs[0].1["id"]
        .as_str()
        .unwrap()
        .starts_with("generic:payment:pay_1#PROCESSING@"));
    let evs = h
        .deliver(payment_body("e2", "pay_1", "wallet_42", 125_000, "NGN"))
        .await;
    assert_eq!(
        kinds(&evs),
        [("payhook.payment.paid", "generic:payment:pay_1")]
    );
    let paid = &evs[0].1;
    assert_eq!(
        (
            &paid["provider"],
            &paid["reference"],
            &paid["account"],
            &paid["amount_minor"],
            &paid["currency"],
            &paid["status"]
        ),
        (
            &json!("generic"),
            &json!("pay_1"),
            &json!("wallet_42"),
            &json!("125000"),
            &json!("NGN"),
            &json!("PAID")
        )
    );
    assert!(
        paid["at_ms"].as_str().unwrap().parse::<i64>().is_ok() && paid["sequence"].is_string(),
        "{paid}"
    );

    // AND a duplicate delivery and a stale state event write nothing that makes an event
    let evs = h
        .deliver(payment_body("e2b", "pay_1", "wallet_42", 125_000, "NGN"))
        .await;
    assert!(evs.is_empty(), "{evs:?}");
    let evs = h
        .deliver(event_body(
            "e1b",
            "payment.processing",
            json!({"reference": "pay_1"}),
        ))
        .await;
    assert!(evs.is_empty(), "{evs:?}");

    // WHEN it is refunded in part, then in full, then the second refund fails at the provider
    let evs = h
        .deliver(refund("e3", "rf_1", 25_000, "refund.succeeded"))
        .await;
    assert_eq!(
        kinds(&evs),
        [("payhook.refund.applied", "generic:refund:rf_1")]
    );
    assert_eq!(
        (
            &evs[0].1["amount_minor"],
            &evs[0].1["payment_reference"],
            &evs[0].1["account"]
        ),
        (&json!("-25000"), &json!("pay_1"), &json!("wallet_42"))
    );
    let evs = h
        .deliver(refund("e4", "rf_2", 100_000, "refund.succeeded"))
        .await;
    let mut got = kinds(&evs);
    got.sort();
    assert_eq!(got.len(), 2, "{evs:?}");
    assert_eq!(got[0].0, "payhook.payment.refunded");
    assert!(got[0].1.starts_with("generic:payment:pay_1#REFUNDED@"));
    assert_eq!(got[1], ("payhook.refund.applied", "generic:refund:rf_2"));
    let evs = h
        .deliver(refund("e5", "rf_2", 100_000, "refund.failed"))
        .await;
    assert_eq!(
        kinds(&evs),
        [("payhook.refund.reversed", "generic:refund_reversal:rf_2")]
    );
    assert_eq!(evs[0].1["amount_minor"], "100000");

    // AND a payment that fails, then succeeds after all: failed, then paid (the recovery)
    let evs = h
        .deliver(event_body(
            "e6",
            "payment.failed",
            json!({"reference": "pay_2"}),
        ))
        .await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0].0, "payhook.payment.failed");
    assert!(evs[0].1["id"]
        .as_str()
        .unwrap()
        .starts_with("generic:payment:pay_2#FAILED@"));
    let evs = h
        .deliver(payment_body("e7", "pay_2", "wallet_42", 500, "NGN"))
        .await;
    assert_eq!(
        kinds(&evs),
        [("payhook.payment.paid", "generic:payment:pay_2")]
    );

    // AND a refund of it reversed, which restores PAID: money events only, no second "paid"
    let evs = h.deliver(event_body("e8", "refund.succeeded", json!({"reference": "rf_3", "payment_reference": "pay_2", "amount": 500, "currency": "NGN"}))).await;
    let mut got = kinds(&evs);
    got.sort();
    assert_eq!(got.len(), 2, "{evs:?}");
    assert_eq!(
        (got[0].0, got[1]),
        (
            "payhook.payment.refunded",
            ("payhook.refund.applied", "generic:refund:rf_3")
        )
    );
    let evs = h.deliver(event_body("e9", "refund.failed", json!({"reference": "rf_3", "payment_reference": "pay_2", "amount": 500, "currency": "NGN"}))).await;
    assert_eq!(
        kinds(&evs),
        [("payhook.refund.reversed", "generic:refund_reversal:rf_3")]
    );
    let status = store
        .payment(ProviderId::GENERIC, &Reference::parse("pay_2").unwrap())
        .await
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(status.as_str(), "PAID");

    // AND a dispute of it: the withdrawal and the reinstatement are one event each, the
    // payment's own change (no new status) none, and a duplicate nothing
    let dispute = |id: &str, kind: &str| {
        event_body(
            id,
            kind,
            json!({"dispute": "dsp_1", "reference": "pay_2", "amount": 700, "currency": "NGN"}),
        )
    };
    let evs = h.deliver(dispute("e10", "dispute.funds_withdrawn")).await;
    assert_eq!(
        kinds(&evs),
        [(
            "payhook.dispute.funds_withdrawn",
            "generic:dispute_withdrawal:dsp_1"
        )]
    );
    assert_eq!(
        (&evs[0].1["amount_minor"], &evs[0].1["payment_reference"]),
        (&json!("-700"), &json!("pay_2"))
    );
    assert!(h
        .deliver(dispute("e10", "dispute.funds_withdrawn"))
        .await
        .is_empty());
    let evs = h.deliver(dispute("e11", "dispute.funds_reinstated")).await;
    assert_eq!(
        kinds(&evs),
        [(
            "payhook.dispute.funds_reinstated",
            "generic:dispute_reinstatement:dsp_1"
        )]
    );
    assert_eq!(evs[0].1["amount_minor"], "700");

    // AND growing the stored layout (an item of the ledger table) is no event
    let s = store.clone();
    let grow = async move {
        s.grow_layout(Layout {
            ledger_shards: 8,
            index_shards: TEST_INDEX_SHARDS,
        })
        .await
        .unwrap();
    };
    let evs = h.step(grow).await;
    assert!(evs.is_empty(), "{evs:?}");

    // THEN every event has its own id: a consumer deduplicating by id drops only redeliveries
    let mut ids = h.ids.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), h.ids.len(), "{:?}", h.ids);
    assert_eq!(h.ids.len(), 13, "{:?}", h.ids);
    eprintln!("events: {:?}", h.ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_payout_status_change_becomes_one_event_keyed_by_the_payout() {
    use payhook::domain::TransferState;
    use payhook::payouts::{Limits, NewPayout, PayoutId, PayoutRequest, Payouts, RequestKey};
    let store = store("change_events_payouts").await;
    let app = app(store.clone(), 30_000);
    let snap = snapshot(&store).await;
    let mut h = Harness {
        store: store.clone(),
        app,
        pipes: pipes(),
        snap,
        seq: 0,
        ids: Vec::new(),
    };
    // GIVEN a funded account
    h.deliver(payment_body("e_fund", "pay_f", "wallet_p", 1_000, "NGN"))
        .await;
    let supports = |_: ProviderId| true;
    let request = PayoutRequest::parse(
        json!({"provider": "generic", "account": "wallet_p", "amount": 400, "currency": "NGN",
               "destination": {"bank": "058"}})
        .to_string()
        .as_bytes(),
        Limits {
            max_amount_minor: 1_000_000,
            supports: &supports,
        },
    )
    .unwrap();
    let id = PayoutId::derive("caller", &RequestKey::parse("k").unwrap());
    // WHEN it is opened (no event: a request under way), reserved, sent, failed, paid after all
    let (s, r, i) = (store.clone(), request.clone(), id.clone());
    let evs = h
        .step(async move {
            s.open_payout(NewPayout {
                payout: &i,
                request: &r,
                shard: 0,
            })
            .await
            .unwrap();
        })
        .await;
    assert!(evs.is_empty(), "{evs:?}");
    let (s, i) = (store.clone(), id.clone());
    let evs = h
        .step(async move {
            let rec = s.payout(&i).await.unwrap().unwrap();
            s.reserve(&rec).await.unwrap();
        })
        .await;
    let want = format!("generic:payout:{id}#reserved");
    assert_eq!(kinds(&evs), [("payhook.payout.reserved", want.as_str())]);
    let (s, i) = (store.clone(), id.clone());
    let evs = h
        .step(async move {
            let ticket = CallTicket {
                kind: CallKind::Send,
                holder: "h1",
                seen_sends: 0,
                bound_ms: 1_000,
                visibility_ms: 1_000,
            };
            s.take_call(&i, ticket).await.unwrap().unwrap();
        })
        .await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0].0, "payhook.payout.sent");
    assert_eq!(evs[0].1["amount"], "400");
    assert_eq!(evs[0].1["reference"], id.as_str());
    // AND what a call records without a status change (its fence, the provider's note) says
    // nothing on the bus
    let (s, i) = (store.clone(), id.clone());
    let evs = h
        .step(async move {
            let ticket = CallTicket {
                kind: CallKind::Ask,
                holder: "h1",
                seen_sends: 1,
                bound_ms: 1_000,
                visibility_ms: 0,
            };
            s.take_call(&i, ticket).await.unwrap().unwrap();
            let note = ProviderNote {
                status: "pending",
                accepted: true,
                refused: false,
            };
            s.note_provider(&i, note).await.unwrap();
        })
        .await;
    assert!(evs.is_empty(), "{evs:?}");
    for word in [
        TransferState::Failed,
        TransferState::Failed,
        TransferState::Success,
    ] {
        let (s, i) = (store.clone(), id.clone());
        h.step(async move {
            let origin = WordOrigin {
                provider: ProviderId::GENERIC,
                money: None,
                recipient: None,
            };
            s.settle_payout(&i, origin, word, word.as_str())
                .await
                .unwrap();
        })
        .await;
    }
    // THEN one event per status entered (reserved, sent, failed, paid), none for the repeated
    // word, each id distinct
    let payout_ids: Vec<&String> = h.ids.iter().filter(|i| i.contains(id.as_str())).collect();
    assert_eq!(payout_ids.len(), 4, "{payout_ids:?}");
    let distinct: std::collections::BTreeSet<_> = payout_ids.iter().collect();
    assert_eq!(distinct.len(), 4);
    assert!(payout_ids.iter().any(|i| i.ends_with("#paid")));
}
