//! Requests per delivery against moto, a DynamoDB emulator that (like DynamoDB, unlike dynalite)
//! returns the existing item (`ALL_OLD`) when a condition fails: there a duplicate costs exactly
//! its failed claiming write and its log `PutItem`, and no read.
//!
//! moto is not atomic under concurrency, so its server runs single-threaded here and the
//! deliveries are sent one after the other. Needs `moto[dynamodb]` and `flask` (requirements-dev.txt,
//! installed by scripts/test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use common::{payment_body, refund_body, send, settings, signed};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::{DynamoStore, TableNames};

/// A single-threaded moto server on a free loopback port. It exits when its stdin closes, so it
/// never outlives the test process; Drop also kills it.
struct Moto {
    child: Child,
    endpoint: String,
}

const SERVER: &str = r#"
import sys, threading, os
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
srv = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=False)
print(srv.server_port, flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
srv.serve_forever()
"#;

impl Moto {
    fn start() -> Moto {
        let check = Command::new("python3")
            .args(["-c", "import moto, flask, werkzeug"])
            .output();
        match check {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "moto is not importable (python3 -c 'import moto, flask, werkzeug' failed: {}). \
                 Install the dev requirements: python3 -m pip install -r requirements-dev.txt \
                 (scripts/test does this)",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("python3 is needed to run moto: {e}"),
        }
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .env("MOTO_ALLOW_NONEXISTENT_REGION", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("moto stdout"))
            .read_line(&mut line)
            .expect("moto port");
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("moto printed {line:?}, not its port"));
        Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client on `moto` whose requests `counter` counts.
fn counted_client(counter: &RequestCounter, moto: &Moto) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&moto.endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

fn counted(counter: &RequestCounter, moto: &Moto, tables: TableNames) -> DynamoStore {
    DynamoStore::new(counted_client(counter, moto), tables, settings())
}

#[tokio::test]
async fn on_a_server_returning_all_old_a_duplicate_costs_two_puts_and_no_read() {
    // GIVEN moto with the four tables, and a router over a client that counts requests
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let store = counted(&counter, &moto, TableNames::with_prefix("moto"));
    store.create_tables().await.expect("create tables on moto");
    let mut app = common::app(store, 30_000);
    Arc::get_mut(&mut app).expect("sole owner").metrics = payhook::metrics::MetricsSink::Off;
    let body = payment_body("evt_moto", "pay_moto", "wallet_moto", 125_000, "NGN");
    // A process reads the ledger layout once, at its first credit: warm it up first.
    let warm = send(
        &app,
        signed(&payment_body(
            "evt_warm",
            "pay_warm",
            "wallet_moto",
            1,
            "NGN",
        )),
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    counter.reset();

    // WHEN a new event is delivered
    let first = send(&app, signed(&body)).await;

    // THEN it applies with payment + its credit's claim, ledger, the claim DONE, log: 4 writes,
    // 0 reads (#32)
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(!first.replayed);
    let new_event = counter.snapshot();
    eprintln!("new event on moto: {new_event:?}");
    assert_eq!(
        counter.get("PutItem"),
        2,
        "ledger entry, log: {new_event:?}"
    );
    assert_eq!(
        counter.get("UpdateItem"),
        2,
        "payment transition with the claim, the claim DONE: {new_event:?}"
    );
    assert_eq!((counter.writes(), counter.reads()), (4, 0), "{new_event:?}");

    // WHEN the same event is redelivered, then the same movement comes under another event id
    for again in [
        body.clone(),
        payment_body("evt_moto_2", "pay_moto", "wallet_moto", 125_000, "NGN"),
    ] {
        counter.reset();
        let dup = send(&app, signed(&again)).await;

        // THEN the stored answer is replayed byte for byte, decided from the ALL_OLD item of the
        // failed paid write (the claim is on the payment): that UpdateItem and the log PutItem,
        // and nothing else
        assert_eq!(dup.status, 200, "{}", dup.body);
        assert!(dup.replayed, "{dup:?}");
        assert_eq!(dup.body, first.body);
        let counts = counter.snapshot();
        eprintln!("duplicate on moto: {counts:?}");
        assert_eq!(counter.get("UpdateItem"), 1, "paid write: {counts:?}");
        assert_eq!(counter.get("PutItem"), 1, "log: {counts:?}");
        assert_eq!(
            counter.get("GetItem"),
            0,
            "ALL_OLD made the read unnecessary: {counts:?}"
        );
        assert_eq!((counter.writes(), counter.reads()), (2, 0), "{counts:?}");
        assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");
    }
}

#[tokio::test]
async fn on_a_server_returning_all_old_a_refund_costs_four_writes_and_its_duplicate_two() {
    // GIVEN moto with the four tables, a credited payment, and a counting client (#44)
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let store = counted(&counter, &moto, TableNames::with_prefix("motorf"));
    store.create_tables().await.expect("create tables on moto");
    let mut app = common::app(store, 30_000);
    Arc::get_mut(&mut app).expect("sole owner").metrics = payhook::metrics::MetricsSink::Off;
    let paid = send(
        &app,
        signed(&payment_body("evt_p", "pay_rf", "wallet_rf", 5_000, "NGN")),
    )
    .await;
    assert_eq!(paid.status, 200, "{}", paid.body);

    // WHEN the payment is refunded in full
    counter.reset();
    let refund = refund_body("evt_rf", "rf_moto", "pay_rf", 5_000);
    let first = send(&app, signed(&refund)).await;

    // THEN the refund with its claim, the ledger entry, the claim DONE and the log: 4 writes,
    // no read (it was 5 writes with the claims table's claim and finalize)
    assert_eq!(
        (first.status, first.replayed),
        (200, false),
        "{}",
        first.body
    );
    let counts = counter.snapshot();
    eprintln!("new refund on moto: {counts:?}");
    assert_eq!(
        (counter.get("UpdateItem"), counter.get("PutItem")),
        (2, 2),
        "{counts:?}"
    );
    assert_eq!(counts.values().sum::<u64>(), 4, "{counts:?}");

    // WHEN it comes again, under its event id and under another
    for again in [
        refund.clone(),
        refund_body("evt_rf2", "rf_moto", "pay_rf", 5_000),
    ] {
        counter.reset();
        let dup = send(&app, signed(&again)).await;

        // THEN the stored answer is replayed from the failed refund write's ALL_OLD image,
        // which holds the refund's claim: that UpdateItem and the log, nothing else
        assert!(dup.replayed, "{dup:?}");
        assert_eq!(dup.body, first.body);
        let counts = counter.snapshot();
        assert_eq!(
            (counter.get("UpdateItem"), counter.get("PutItem")),
            (1, 1),
            "{counts:?}"
        );
        assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");
    }
}

/// The claim crate on its own, where Powertools went wrong (TypeScript before 1.18.1, Java
/// before 2.6.0): a duplicate decided from the `ALL_OLD` image of the failed put is still
/// compared with its payload, so other money under the same key is a conflict, never a replay.
#[tokio::test]
async fn the_claim_crate_judges_payload_on_the_all_old_path_too() {
    use dynamo_claim::{Answer, ClaimTable, Failed, Idempotency};
    // GIVEN the crate's table on moto, through a client that counts requests
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let table = ClaimTable::new(&counted_client(&counter, &moto), "crate-claims");
    table.create_if_missing().await.expect("create on moto");
    let once = Idempotency::<serde_json::Value>::key_path(table, "/order_id")
        .validate_path("/amount_minor");
    let charges = std::sync::atomic::AtomicUsize::new(0);
    let charge = |_| async {
        charges.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, Failed<String>>("ch_1".to_owned())
    };
    let paid = serde_json::json!({"order_id": "ord_1", "amount_minor": 500});
    assert_eq!(
        once.run(&paid, None, charge).await.unwrap(),
        Answer::Ran("ch_1".to_owned())
    );
    // WHEN the same key comes with other money, then with the same
    counter.reset();
    let other = serde_json::json!({"order_id": "ord_1", "amount_minor": 90_000});
    let conflict = once.run(&other, None, charge).await.unwrap();
    let conflict_requests = counter.snapshot();
    counter.reset();
    let replay = once.run(&paid, None, charge).await.unwrap();
    // THEN a conflict and a replay, each decided from the failed put alone (no read)
    assert_eq!(conflict, Answer::Conflict);
    assert_eq!(replay, Answer::Replayed("ch_1".to_owned()));
    assert_eq!(
        conflict_requests.values().sum::<u64>(),
        1,
        "{conflict_requests:?}"
    );
    assert_eq!(counter.get("GetItem"), 0, "{:?}", counter.snapshot());
    assert_eq!(charges.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A generic dispute or refund-failed body about `payment`.
fn movement_body(event_id: &str, kind: &str, data: serde_json::Value) -> String {
    common::event_body(event_id, kind, data)
}

#[tokio::test]
async fn on_a_server_returning_all_old_a_dispute_movement_and_a_reversal_cost_four_writes_and_their_duplicates_two(
) {
    // GIVEN moto with the four tables, two credited payments (one refunded in full), and a
    // counting client (#44)
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let store = counted(&counter, &moto, TableNames::with_prefix("motodr"));
    store.create_tables().await.expect("create tables on moto");
    let mut app = common::app(store.clone(), 30_000);
    Arc::get_mut(&mut app).expect("sole owner").metrics = payhook::metrics::MetricsSink::Off;
    for p in ["pay_dp", "pay_rv"] {
        let paid = send(
            &app,
            signed(&payment_body(
                &format!("evt_{p}"),
                p,
                "wallet_dr",
                5_000,
                "NGN",
            )),
        )
        .await;
        assert_eq!(paid.status, 200, "{}", paid.body);
    }
    let refunded = send(
        &app,
        signed(&refund_body("evt_r", "rf_rv", "pay_rv", 5_000)),
    )
    .await;
    assert_eq!(refunded.status, 200, "{}", refunded.body);
    let dispute = |id: &str, kind: &str| {
        let data = serde_json::json!({"dispute": "dsp_m", "reference": "pay_dp",
            "amount": 2_000, "currency": "NGN"});
        movement_body(id, kind, data)
    };
    let reversal = |id: &str| {
        let data = serde_json::json!({"reference": "rf_rv", "payment_reference": "pay_rv",
            "amount": 5_000, "currency": "NGN"});
        movement_body(id, "refund.failed", data)
    };
    let movements = [
        (
            "withdrawal",
            dispute("evt_w", "dispute.funds_withdrawn"),
            dispute("evt_w2", "dispute.funds_withdrawn"),
        ),
        (
            "reinstatement",
            dispute("evt_i", "dispute.funds_reinstated"),
            dispute("evt_i2", "dispute.funds_reinstated"),
        ),
        ("reversal", reversal("evt_v"), reversal("evt_v2")),
    ];
    for (name, body, other_id) in movements {
        // WHEN the movement arrives
        counter.reset();
        let first = send(&app, signed(&body)).await;

        // THEN its write with its claim, the ledger entry, the claim DONE and the log: 4
        // writes, no read (5 writes when the claims table held its claim)
        assert_eq!(
            (first.status, first.replayed),
            (200, false),
            "{name}: {}",
            first.body
        );
        assert_eq!(first.json()["status"], "applied", "{name}");
        // (a withdrawal also reads the balance, to say so when it took it below zero)
        let counts = counter.snapshot();
        eprintln!("new {name} on moto: {counts:?}");
        assert_eq!(
            (counter.get("UpdateItem"), counter.get("PutItem")),
            (2, 2),
            "{name}: {counts:?}"
        );
        let reads = counter.reads();
        let balance_reads = if name == "withdrawal" {
            counter.reset();
            let wallet = payhook::domain::AccountId::parse("wallet_dr").expect("an account");
            payhook::ledger::Ledger::balance(&store, &wallet)
                .await
                .expect("the balance");
            counter.reads()
        } else {
            0
        };
        assert_eq!(reads, balance_reads, "{name}: {counts:?}");
        assert_eq!(
            counts.values().sum::<u64>(),
            4 + reads,
            "{name}: {counts:?}"
        );

        // AND its duplicates (the same event id, another) replay from the failed write's
        // ALL_OLD image: that UpdateItem and the log
        for again in [body.clone(), other_id] {
            counter.reset();
            let dup = send(&app, signed(&again)).await;
            assert!(dup.replayed, "{name}: {dup:?}");
            assert_eq!(dup.body, first.body, "{name}");
            let counts = counter.snapshot();
            assert_eq!(
                (counter.get("UpdateItem"), counter.get("PutItem")),
                (1, 1),
                "{name}: {counts:?}"
            );
            assert_eq!(counts.values().sum::<u64>(), 2, "{name}: {counts:?}");
        }
    }
}

async fn sent_payout_item(store: &DynamoStore, id: &str, account: &str) {
    payhook_tools::capacity::sent_payout(store, id, account)
        .await
        .unwrap();
}

#[tokio::test]
async fn on_a_server_returning_all_old_a_settlement_word_costs_a_read_and_four_writes_and_a_zombie_is_fenced_without_a_read(
) {
    use payhook::domain::{Fingerprint, IdempotencyKey, Operation, ProviderId, TransferState};
    use payhook::idempotency::{FinalizeOutcome, NewHostClaim, OwnerToken, StoredResponse};
    use payhook::payouts::{HeldWord, HeldWordCall, PayoutId, Payouts, WordOrigin};

    // GIVEN moto with the four tables, two sent payouts, and a counting client (#44)
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let store = counted(&counter, &moto, TableNames::with_prefix("motopw"));
    store.create_tables().await.expect("create tables on moto");
    let mut app = common::app(store.clone(), 30_000);
    Arc::get_mut(&mut app).expect("sole owner").metrics = payhook::metrics::MetricsSink::Off;
    let (a, b) = (
        "po_0000000000000000000000000000000a",
        "po_0000000000000000000000000000000b",
    );
    sent_payout_item(&store, a, "wallet_pw").await;
    sent_payout_item(&store, b, "wallet_pw").await;
    // A process reads the ledger layout once, at its first movement: warm it up first.
    let warm = send(
        &app,
        signed(&payment_body("evt_warm", "pay_warm", "wallet_pw", 1, "NGN")),
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let word = |n: usize| {
        common::event_body(
            &format!("evt_pw_{n}"),
            "transfer.failed",
            serde_json::json!({"reference": a, "amount": 100, "currency": "NGN"}),
        )
    };

    // WHEN the provider says the first failed, and says it again
    counter.reset();
    let first = send(&app, signed(&word(0))).await;

    // THEN the payout's read, the word with its claim, the credit back, the claim DONE, the
    // log; and the duplicate is the read and its log
    assert_eq!(
        (first.status, first.replayed),
        (200, false),
        "{}",
        first.body
    );
    let counts = counter.snapshot();
    eprintln!("new word on moto: {counts:?}");
    assert_eq!(
        (
            counter.get("UpdateItem"),
            counter.get("GetItem"),
            counter.get("PutItem")
        ),
        (2, 1, 2),
        "{counts:?}"
    );
    assert_eq!(counts.values().sum::<u64>(), 5, "{counts:?}");
    counter.reset();
    let dup = send(&app, signed(&word(1))).await;
    assert_eq!(
        (dup.replayed, dup.body.as_str()),
        (true, first.body.as_str())
    );
    let counts = counter.snapshot();
    assert_eq!(
        (counter.get("GetItem"), counter.get("PutItem")),
        (1, 1),
        "{counts:?}"
    );
    assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");

    // WHEN attempt A takes the second payout's word with a lease run out, B takes it over
    let id = PayoutId::parse(b).unwrap();
    let key = IdempotencyKey::new(
        ProviderId::GENERIC,
        Operation::PayoutFailed,
        &id.reference(),
    );
    let origin = WordOrigin {
        provider: ProviderId::GENERIC,
        money: None,
        recipient: None,
    };
    let call = HeldWordCall {
        origin: &origin,
        word: TransferState::Failed,
        provider_status: "failed",
        key: &key,
    };
    let fp = Fingerprint::from_stored("fp-of-the-word".into());
    let (ta, tb) = (OwnerToken::generate(), OwnerToken::generate());
    let claim = |token| NewHostClaim {
        token,
        lease_ms: 0,
        fingerprint: &fp,
    };
    let taken = store.settle_held(&id, call, claim(&ta)).await.unwrap();
    assert!(matches!(taken, HeldWord::Taken { .. }), "{taken:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    assert!(store
        .take_over_word(&id, &key, &ta, &tb, 30_000)
        .await
        .unwrap());
    let answer = StoredResponse {
        status: 200,
        body: "{\"by\":\"b\"}".into(),
    };
    assert_eq!(
        store.finalize_word(&id, &key, &tb, &answer).await.unwrap(),
        FinalizeOutcome::Done
    );

    // THEN A's takeover and finalize fail and are judged from the ALL_OLD image alone: one
    // UpdateItem each, no read; A hears B's answer
    counter.reset();
    assert!(!store
        .take_over_word(&id, &key, &ta, &ta, 30_000)
        .await
        .unwrap());
    let late = store.finalize_word(&id, &key, &ta, &answer).await.unwrap();
    assert_eq!(late, FinalizeOutcome::Superseded(Some(answer)));
    let counts = counter.snapshot();
    assert_eq!(counter.get("UpdateItem"), 2, "{counts:?}");
    assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");
}

#[tokio::test]
async fn a_credits_first_write_answers_the_payment_as_stored_on_moto() {
    // GIVEN moto, whose `ALL_OLD` on a successful update is its own code, not dynalite's
    let moto = Moto::start();
    let counter = RequestCounter::new();
    let store = counted(&counter, &moto, TableNames::with_prefix("motoimg"));
    store.create_tables().await.expect("create tables on moto");
    // WHEN each shape of the PAID write runs THEN its record is the payment as stored
    crate::paid_image::every_paid_write_answers_the_payment_as_stored(&store).await;
}
