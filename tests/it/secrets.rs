//! Signing secrets read from Secrets Manager at run time (moto's Secrets Manager, the real
//! `payhook serve` process, dynalite for the tables): a rotation through AWSPENDING,
//! AWSCURRENT and AWSPREVIOUS never rejects a delivery signed with either side, the old secret
//! stops once no stage holds it, Secrets Manager down at start-up answers 503 (never open),
//! down at a refresh keeps the last good secrets, and no secret value reaches a log line.
//!
//! moto runs single-threaded (it is not atomic under concurrency); every call here is
//! sequential. Needs `moto` (requirements-dev.txt, installed by scripts/test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use common::*;
use payhook::cli::client::post;
use payhook::dynamodb::DynamoStore;
use payhook::providers::generic::StandardWebhooks;

const SERVER: &str = r#"
import sys, threading, os
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
srv = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=False)
print(srv.server_port, flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
srv.serve_forever()
"#;

/// A single-threaded moto server; killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start() -> Moto {
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .env("MOTO_ALLOW_NONEXISTENT_REGION", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto (python3 -m pip install -r requirements-dev.txt)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("moto printed {line:?}, not its port"));
        Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    fn client(&self) -> aws_sdk_secretsmanager::Client {
        let conf = aws_sdk_secretsmanager::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .build();
        aws_sdk_secretsmanager::Client::from_conf(conf)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `payhook serve` reading the generic signing secrets from `secret_id` at `sm_endpoint`.
struct Server {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Server {
    async fn start(store: &DynamoStore, sm_endpoint: &str, secret_id: &str, name: &str) -> Server {
        Self::start_refreshing(store, sm_endpoint, secret_id, name, 1).await
    }

    /// The same, reading the secrets again every `refresh_s`.
    async fn start_refreshing(
        store: &DynamoStore,
        sm_endpoint: &str,
        secret_id: &str,
        name: &str,
        refresh_s: u64,
    ) -> Server {
        Self::start_with(store, sm_endpoint, secret_id, name, refresh_s, &[]).await
    }

    /// The same, with more environment variables.
    async fn start_with(
        store: &DynamoStore,
        sm_endpoint: &str,
        secret_id: &str,
        name: &str,
        refresh_s: u64,
        extra: &[(&str, &str)],
    ) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::env::temp_dir().join(format!("payhook-secrets-{name}-{port}.log"));
        let mut child = payhook_env(&mut Command::new(env!("CARGO_BIN_EXE_payhook")), store)
            .env_remove("PAYHOOK_GENERIC_SECRETS")
            .env("PAYHOOK_GENERIC_SECRETS_ARN", secret_id)
            .env("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm_endpoint)
            .env("PAYHOOK_SECRETS_REFRESH_S", refresh_s.to_string())
            .env(
                "RUST_LOG",
                "debug,aws_smithy_runtime=trace,aws_sdk_secretsmanager=trace,hyper=info",
            )
            .envs(extra.iter().copied())
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Server { child, port, log };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("payhook serve did not start");
    }

    /// Delivers a new payment signed with `secret`; the HTTP status.
    async fn deliver(&self, secret: &str, n: &str) -> u16 {
        let body = payment_body(
            &format!("evt_{n}"),
            &format!("pay_{n}"),
            "wallet_sm",
            100,
            "NGN",
        );
        let scheme = StandardWebhooks::from_env_value(secret, 300).unwrap();
        let ts = now_s();
        let id = format!("msg_{n}");
        let headers = vec![
            ("webhook-id".to_owned(), id.clone()),
            ("webhook-timestamp".to_owned(), ts.to_string()),
            (
                "webhook-signature".to_owned(),
                scheme.sign(&id, ts, body.as_bytes()),
            ),
        ];
        let url = format!("http://127.0.0.1:{}/webhooks/generic", self.port);
        post(&url, &headers, body.into_bytes())
            .await
            .unwrap()
            .status
    }

    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// Every form a secret value could be logged in.
fn forms(secret: &str) -> Vec<String> {
    let b64 = secret.trim_start_matches("whsec_").to_owned();
    vec![secret.to_owned(), b64]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_through_secrets_manager_never_rejects_either_side_and_ends_with_the_new() {
    let store = store("secrets_rotation").await;
    let mut moto = Moto::start();
    let sm = moto.client();
    // GIVEN one signing secret in Secrets Manager, and a server that reads it
    let created = sm
        .create_secret()
        .name("payhook/generic")
        .secret_string(SECRET)
        .send()
        .await
        .unwrap();
    let old_version = created.version_id().unwrap().to_owned();
    let server = Server::start(&store, &moto.endpoint, "payhook/generic", "rotation").await;
    assert_eq!(server.deliver(SECRET, "1").await, 200);
    assert_eq!(server.deliver(OTHER_SECRET, "2").await, 401);

    // WHEN the rotation puts the new secret in AWSPENDING
    let pending = sm
        .put_secret_value()
        .secret_id("payhook/generic")
        .secret_string(OTHER_SECRET)
        .version_stages("AWSPENDING")
        .send()
        .await
        .unwrap();
    let new_version = pending.version_id().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN both sides verify
    assert_eq!(server.deliver(OTHER_SECRET, "3").await, 200);
    assert_eq!(server.deliver(SECRET, "4").await, 200);

    // WHEN AWSCURRENT moves to the new secret (the old one is AWSPREVIOUS)
    sm.update_secret_version_stage()
        .secret_id("payhook/generic")
        .version_stage("AWSCURRENT")
        .move_to_version_id(&new_version)
        .remove_from_version_id(&old_version)
        .send()
        .await
        .unwrap();
    sm.update_secret_version_stage()
        .secret_id("payhook/generic")
        .version_stage("AWSPENDING")
        .remove_from_version_id(&new_version)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN both still verify
    assert_eq!(server.deliver(OTHER_SECRET, "5").await, 200);
    assert_eq!(server.deliver(SECRET, "6").await, 200);

    // WHEN no stage holds the old secret any more
    let described = sm
        .describe_secret()
        .secret_id("payhook/generic")
        .send()
        .await
        .unwrap();
    let previous = described
        .version_ids_to_stages()
        .unwrap()
        .iter()
        .find(|(_, stages)| stages.iter().any(|s| s == "AWSPREVIOUS"))
        .map(|(v, _)| v.clone())
        .expect("the old version is AWSPREVIOUS");
    sm.update_secret_version_stage()
        .secret_id("payhook/generic")
        .version_stage("AWSPREVIOUS")
        .remove_from_version_id(&previous)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN after the next refresh the old secret is refused, the new one verifies
    assert_eq!(server.deliver(OTHER_SECRET, "7").await, 200);
    assert_eq!(server.deliver(SECRET, "8").await, 401);

    // WHEN Secrets Manager goes away
    moto.stop();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN the last good secrets keep working
    assert_eq!(server.deliver(OTHER_SECRET, "9").await, 200);
    assert_eq!(server.deliver(SECRET, "10").await, 401);

    // AND no secret value is in any log line (the log ran at debug, the SDK's at trace)
    let log = server.stop();
    assert!(
        log.contains("provider secrets read from Secrets Manager"),
        "{log}"
    );
    for secret in [SECRET, OTHER_SECRET] {
        for form in forms(secret) {
            assert!(!log.contains(&form), "a secret value is in the log");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_manager_down_at_start_up_answers_503_never_open() {
    let store = store("secrets_down").await;
    // Nothing listens there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let before = counts(&store).await;
    let server = Server::start(&store, &closed, "payhook/generic", "down").await;
    assert_eq!(server.deliver(SECRET, "1").await, 503);
    assert_eq!(server.deliver(OTHER_SECRET, "2").await, 503);
    let log = server.stop();
    assert!(log.contains("provider secrets unreadable"), "{log}");
    assert_eq!(
        counts(&store).await,
        before,
        "a refused delivery writes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_no_known_secret_verifies_reads_them_again_at_once_and_rate_limited() {
    let store = store("secrets_forced").await;
    let moto = Moto::start();
    let sm = moto.client();
    // GIVEN a server whose interval refresh is an hour away
    sm.create_secret()
        .name("payhook/generic")
        .secret_string(SECRET)
        .send()
        .await
        .unwrap();
    let server =
        Server::start_refreshing(&store, &moto.endpoint, "payhook/generic", "forced", 3_600).await;
    assert_eq!(server.deliver(SECRET, "1").await, 200);
    // WHEN the rotation puts a new secret in AWSPENDING and the sender signs with it at once
    sm.put_secret_value()
        .secret_id("payhook/generic")
        .secret_string(OTHER_SECRET)
        .version_stages("AWSPENDING")
        .send()
        .await
        .unwrap();
    // THEN the first delivery signed with it is verified after one forced read, not refused
    assert_eq!(server.deliver(OTHER_SECRET, "2").await, 200);
    // AND forged deliveries right after it force no further read (at most one per 30 s)
    let forged = "whsec_Zm9yZ2VyLW9mLXBheWhvb2stc2lnbmF0dXJlcw==";
    assert_eq!(server.deliver(forged, "3").await, 401);
    assert_eq!(server.deliver(forged, "4").await, 401);
    assert_eq!(server.deliver(SECRET, "5").await, 200);
    let log = server.stop();
    assert_eq!(
        log.matches("provider secrets read again").count(),
        1,
        "one forced read, then rate-limited"
    );
}

/// The version that holds `stage` now.
async fn version_in(sm: &aws_sdk_secretsmanager::Client, id: &str, stage: &str) -> String {
    let described = sm.describe_secret().secret_id(id).send().await.unwrap();
    described
        .version_ids_to_stages()
        .unwrap()
        .iter()
        .find(|(_, stages)| stages.iter().any(|s| s == stage))
        .map(|(v, _)| v.clone())
        .unwrap_or_else(|| panic!("no version is {stage}"))
}

const THIRD_SECRET: &str = "whsec_dGhpcmQtc2VjcmV0LWZvci1yZXZvY2F0aW9uIQ==";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_secret_ends_after_the_grace_at_once_when_unlabelled_and_with_its_deleted_secret()
{
    let store = store("secrets_revoke").await;
    let moto = Moto::start();
    let sm = moto.client();
    let id = "payhook/generic";
    // GIVEN a signing secret that has leaked, and a server reading secrets every second with a
    // 4 s grace for AWSPREVIOUS
    sm.create_secret()
        .name(id)
        .secret_string(SECRET)
        .send()
        .await
        .unwrap();
    let server = Server::start_with(
        &store,
        &moto.endpoint,
        id,
        "revoke",
        1,
        &[("PAYHOOK_SECRET_PREVIOUS_GRACE_S", "4")],
    )
    .await;
    assert_eq!(server.deliver(SECRET, "1").await, 200);

    // WHEN the operator puts a new value in a hurry (the leaked one becomes AWSPREVIOUS)
    sm.put_secret_value()
        .secret_id(id)
        .secret_string(OTHER_SECRET)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN within the grace both verify (a sender switching late is not refused)
    assert_eq!(server.deliver(OTHER_SECRET, "2").await, 200);
    assert_eq!(server.deliver(SECRET, "3").await, 200);
    // AND once the grace after the new version's CreatedDate is over, the leaked one is
    // refused though it still holds AWSPREVIOUS, with no restart and no label removed
    tokio::time::sleep(Duration::from_millis(4_600)).await;
    assert!(
        !version_in(&sm, id, "AWSPREVIOUS").await.is_empty(),
        "the leaked version is still AWSPREVIOUS"
    );
    assert_eq!(server.deliver(SECRET, "4").await, 401, "past the grace");
    assert_eq!(server.deliver(OTHER_SECRET, "5").await, 200);

    // WHEN the second secret leaks too: a new value, then the runbook's revoke step (the
    // AWSPREVIOUS label removed from the leaked version) at once, inside the grace
    sm.put_secret_value()
        .secret_id(id)
        .secret_string(THIRD_SECRET)
        .send()
        .await
        .unwrap();
    let leaked = version_in(&sm, id, "AWSPREVIOUS").await;
    sm.update_secret_version_stage()
        .secret_id(id)
        .version_stage("AWSPREVIOUS")
        .remove_from_version_id(&leaked)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN after one refresh interval the leaked secret is refused, the new one verifies
    assert_eq!(server.deliver(OTHER_SECRET, "6").await, 401, "revoked");
    assert_eq!(server.deliver(THIRD_SECRET, "7").await, 200);

    // WHEN the secret itself is deleted (scheduled for deletion)
    sm.delete_secret()
        .secret_id(id)
        .recovery_window_in_days(7)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN that is a revocation, not an outage: nothing it signed is accepted any more
    let before = counts(&store).await;
    assert_eq!(server.deliver(THIRD_SECRET, "8").await, 503);
    assert_eq!(
        counts(&store).await,
        before,
        "a refused delivery writes nothing"
    );

    // WHEN it is restored, then deleted for good (not found)
    sm.restore_secret().secret_id(id).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(server.deliver(THIRD_SECRET, "9").await, 200, "restored");
    sm.delete_secret()
        .secret_id(id)
        .force_delete_without_recovery(true)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // THEN not found revokes too
    assert_eq!(server.deliver(THIRD_SECRET, "10").await, 503);
    let log = server.stop();
    assert!(log.contains("revoked"), "the revocation is logged: {log}");
    for secret in [SECRET, OTHER_SECRET, THIRD_SECRET] {
        for form in forms(secret) {
            assert!(!log.contains(&form), "a secret value is in the log");
        }
    }
}
