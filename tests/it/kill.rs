//! `payhook serve` killed with SIGKILL at random moments under load and restarted, senders
//! retrying as providers do: every reference is applied exactly once once the leases expired.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use payhook::cli::client::post;
use payhook::domain::{AccountId, Currency};
use payhook::dynamodb::DynamoStore;
use payhook::ledger::Ledger;
use payhook::pipeline::Pipeline;
use payhook::providers::generic::StandardWebhooks;
use payhook::reconcile::{HttpProviderApi, ReconcileSettings, Reconciler};
use rand::{Rng, SeedableRng};

const LEASE_MS: i64 = 300;

fn spawn_server(store: &DynamoStore, port: u16) -> Child {
    payhook_env(&mut Command::new(env!("CARGO_BIN_EXE_payhook")), store)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("PAYHOOK_LEASE_MS", LEASE_MS.to_string())
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn payhook serve")
}

fn headers(body: &str) -> Vec<(String, String)> {
    let scheme = StandardWebhooks::from_env_value(SECRET, 300).unwrap();
    let ts = now_s();
    vec![
        ("webhook-id".into(), "msg_kill".into()),
        ("webhook-timestamp".into(), ts.to_string()),
        (
            "webhook-signature".into(),
            scheme.sign("msg_kill", ts, body.as_bytes()),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_never_double_applies() {
    // GIVEN a real `payhook serve` process and 100 references delivered 1–3 times each
    let store = store("kill").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/webhooks/generic");
    let seed: u64 = rand::random();
    eprintln!("kill seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut deliveries = Vec::new();
    let mut expected = 0i64;
    for i in 0..100 {
        let amount = rng.gen_range(1..50_000);
        expected += amount;
        for c in 0..rng.gen_range(1..=3) {
            deliveries.push(payment_body(
                &format!("k{i}_{c}"),
                &format!("kr{i}"),
                "w_kill",
                amount,
                "NGN",
            ));
        }
    }
    rand::seq::SliceRandom::shuffle(deliveries.as_mut_slice(), &mut rng);
    let server = Arc::new(std::sync::Mutex::new(spawn_server(&store, port)));
    let done = Arc::new(AtomicBool::new(false));

    // WHEN a killer SIGKILLs and restarts the server at random moments
    let killer = {
        let (server, done, store) = (server.clone(), done.clone(), store.clone());
        tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
            let mut kills = 0;
            while !done.load(Ordering::SeqCst) && kills < 6 {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(150..500))).await;
                let mut child = server.lock().unwrap();
                child.kill().unwrap();
                child.wait().unwrap();
                *child = spawn_server(&store, port);
                kills += 1;
            }
            kills
        })
    };
    // AND senders retry connection errors, 409 and 5xx like a provider
    let statuses: Vec<u16> = futures::stream::iter(deliveries)
        .map(|body| {
            let url = url.clone();
            async move {
                for _ in 0..400 {
                    match post(&url, &headers(&body), body.clone().into_bytes()).await {
                        Ok(r) if r.status == 200 => return 200,
                        Ok(r) => assert!(
                            r.status == 409 || r.status >= 500,
                            "{} {}",
                            r.status,
                            r.body
                        ),
                        Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                0
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    done.store(true, Ordering::SeqCst);
    let kills = killer.await.unwrap();
    {
        let mut child = server.lock().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    // THEN every delivery ended in 200 and, once leases expired and reconciliation ran, each
    // reference was applied exactly once
    eprintln!("seed {seed}: {kills} kills");
    assert!(kills >= 1, "the server was never killed");
    assert!(
        statuses.iter().all(|s| *s == 200),
        "seed {seed}: some deliveries never settled"
    );
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 100)).await;
    let (providers, _) = config(LEASE_MS).providers();
    let pipeline = Pipeline::new(store.clone());
    let api = HttpProviderApi::new(Vec::new()).unwrap();
    let settings = ReconcileSettings {
        pending_after_ms: 0,
        ..ReconcileSettings::default()
    };
    let report = Reconciler {
        pipeline: &pipeline,
        providers: &providers,
        api: &api,
        settings,
    }
    .run()
    .await
    .unwrap();
    assert!(report.needs_human.is_empty(), "{report:?}");
    let b = store
        .balance(&AccountId::parse("w_kill").unwrap())
        .await
        .unwrap();
    assert_eq!(
        (
            b.balances.get(&Currency::parse("NGN").unwrap()).copied(),
            b.entries
        ),
        (Some(expected), 100),
        "seed {seed}"
    );
}
