//! Money out under providers that behave like real ones (issue #30, items 1-6), through the
//! real binary: `payhook serve` against dynalite and a fake transfer API on loopback that can
//! hold a POST for seconds, keep a transfer invisible to `GET /transfers/{reference}` until it
//! has processed it (it commits after answering), dedupe by reference or not, refuse with a
//! 4xx, and answer after payhook has given up. Each test counts what matters: POSTs and
//! transfers per reference, money sent against money debited, balances, and the answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::transfer_api::{Behaviour, Seen, Shared, PATIENT};
use common::*;
use payhook::domain::{AccountId, Currency};
use payhook::dynamodb::DynamoStore;
use payhook::http::App;
use payhook::ledger::Ledger;
use serde_json::{json, Value};

fn seen(fake: &Shared, reference: &str) -> Seen {
    fake.lock().unwrap().seen(reference)
}

pub(crate) fn total_posts(fake: &Shared) -> usize {
    fake.lock().unwrap().total_posts()
}

// ------------------------------------------------------------------------------- the binary

pub(crate) const TOKEN: &str = "payout-token-for-the-provider-tests-0001";
pub(crate) const OTHER_TOKEN: &str = "payout-token-for-the-provider-tests-0002";

/// A `payhook serve` child, killed when dropped.
pub(crate) struct Serve {
    child: std::process::Child,
    port: u16,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `payhook serve` on `store`'s tables, paying out through the fake at `url`, with the
/// lease, call bound and visibility window given (and `extra` variables).
pub(crate) async fn serve(
    store: &DynamoStore,
    url: &str,
    timing: Timing,
    extra: &[(&str, &str)],
) -> Serve {
    let port = free_port();
    let child = serve_command(store, url, timing, extra, port)
        .spawn()
        .unwrap();
    let s = Serve { child, port };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("payhook serve did not start");
}

/// Runs `payhook serve` expecting it to refuse to start: its stderr.
fn serve_refused(store: &DynamoStore, url: &str, timing: Timing, extra: &[(&str, &str)]) -> String {
    let out = serve_command(store, url, timing, extra, free_port())
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success(), "payhook serve started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `payhook serve` command [`serve`] runs, on `port`, its output discarded.
pub(crate) fn serve_command(
    store: &DynamoStore,
    url: &str,
    timing: Timing,
    extra: &[(&str, &str)],
    port: u16,
) -> std::process::Command {
    // PAYHOOK_TEST_BINARY runs these same tests against another build (an earlier release, to
    // show what each fake behaviour did before a change).
    let bin = std::env::var("PAYHOOK_TEST_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_payhook").to_owned());
    let mut cmd = std::process::Command::new(bin);
    payhook_env(&mut cmd, store)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("PAYHOOK_GENERIC_API_URL", url)
        .env("PAYHOOK_GENERIC_API_KEY", "k_test")
        .env("PAYHOOK_LEASE_MS", timing.lease_ms.to_string())
        .env("PAYHOOK_PROVIDER_TIMEOUT_MS", timing.bound_ms.to_string())
        .env(
            "PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS",
            timing.visibility_ms.to_string(),
        )
        .env("PAYHOOK_PAYSTACK_SECRETS", PAYSTACK_SECRET)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if !extra.iter().any(|(k, _)| k.starts_with("PAYHOOK_PAYOUT_")) {
        cmd.env("PAYHOOK_PAYOUT_TOKEN", TOKEN);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

/// The fake provider, judging overlaps by payhook's bound in `timing`.
pub(crate) async fn fake_provider(b: Behaviour, timing: Timing) -> (String, Shared) {
    common::transfer_api::start(b, timing.bound_ms).await
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub lease_ms: u64,
    pub bound_ms: u64,
    pub visibility_ms: u64,
}

impl Timing {
    /// How long a call's fence holds: its bound, the clock margin, and the store clock's second.
    pub fn fence_ms(self) -> u64 {
        self.bound_ms + payhook::payouts::calls::CALL_MARGIN_MS as u64 + 1_000
    }
}

/// An answer over HTTP: status, the headers that matter, the body.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub payout_status: Option<String>,
    pub body: Value,
}

impl Answer {
    pub fn payout(&self) -> String {
        self.body["payout"].as_str().unwrap_or_default().to_owned()
    }
}

/// One HTTP/1.1 request (a tiny client: the tests need no more). `None`: the connection broke.
async fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Answer> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    Some(Answer {
        status,
        replayed: header("idempotent-replayed").as_deref() == Some("true"),
        payout_status: header("payout-status"),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    })
}

fn payout_body(account: &str, amount: i64) -> String {
    json!({"provider": "generic", "account": account, "amount": amount, "currency": "NGN",
           "destination": {"bank": "058", "account_number": "0123456789"}})
    .to_string()
}

pub(crate) async fn pay_with(
    s: &Serve,
    token: &str,
    key: &str,
    account: &str,
    amount: i64,
) -> Option<Answer> {
    let auth = format!("Bearer {token}");
    http(
        s.port,
        "POST",
        "/payouts",
        &[
            ("authorization", &auth),
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        &payout_body(account, amount),
    )
    .await
}

async fn pay(s: &Serve, key: &str, account: &str, amount: i64) -> Answer {
    pay_with(s, TOKEN, key, account, amount)
        .await
        .expect("payhook serve answered")
}

/// Every answer about a payout tells one story: its body's status is its `Payout-Status`.
fn one_story(a: &Answer) {
    if let (Some(header), Some(body)) = (a.payout_status.as_deref(), a.body["status"].as_str()) {
        assert_eq!(header, body, "Payout-Status and the body disagree: {a:?}");
    }
}

pub(crate) async fn balance(store: &DynamoStore, account: &str) -> i64 {
    let b = store
        .balance(&AccountId::parse(account).unwrap())
        .await
        .unwrap();
    b.balances
        .get(&Currency::parse("NGN").unwrap())
        .copied()
        .unwrap_or(0)
}

pub(crate) async fn fund(app: &Arc<App<DynamoStore>>, account: &str, amount: i64) {
    let reference = format!("pay_{account}");
    let body = payment_body(
        &format!("evt_{account}"),
        &reference,
        account,
        amount,
        "NGN",
    );
    assert_eq!(send(app, signed(&body)).await.status, 200);
}

const PAYSTACK_SECRET: &str = "sk_test_payout_providers_paystack";

/// A Paystack-signed webhook, posted to the serve process.
async fn paystack_webhook(s: &Serve, body: &str) -> Answer {
    let p =
        payhook::providers::paystack::Paystack::from_env_value(PAYSTACK_SECRET, "account").unwrap();
    let sig = p.sign(body.as_bytes());
    http(
        s.port,
        "POST",
        "/webhooks/paystack",
        &[
            ("content-type", "application/json"),
            ("x-paystack-signature", &sig),
        ],
        body,
    )
    .await
    .unwrap()
}

/// A generic-signed settlement webhook about `payout`, posted to the serve process.
pub(crate) async fn generic_word(
    s: &Serve,
    event: &str,
    payout: &str,
    amount: i64,
    n: usize,
) -> Answer {
    let body = event_body(
        &format!("evt_{event}_{payout}_{n}"),
        event,
        json!({"reference": payout, "amount": amount, "currency": "NGN"}),
    );
    let scheme =
        payhook::providers::generic::StandardWebhooks::from_env_value(SECRET, 300).unwrap();
    let (id, ts) = (format!("msg_{n}"), now_s());
    let sig = scheme.sign(&id, ts, body.as_bytes());
    let ts = ts.to_string();
    http(
        s.port,
        "POST",
        "/webhooks/generic",
        &[
            ("content-type", "application/json"),
            ("webhook-id", &id),
            ("webhook-timestamp", &ts),
            ("webhook-signature", &sig),
        ],
        &body,
    )
    .await
    .unwrap()
}

/// Retries `key` every `every_ms` for `for_ms`, checking each answer with `check`; returns them.
async fn retry_for(
    s: &Serve,
    key: &str,
    account: &str,
    amount: i64,
    every_ms: u64,
    for_ms: u64,
    mut check: impl FnMut(&Answer),
) -> Vec<Answer> {
    let until = Instant::now() + Duration::from_millis(for_ms);
    let mut out = Vec::new();
    while Instant::now() < until {
        if let Some(a) = pay_with(s, TOKEN, key, account, amount).await {
            one_story(&a);
            check(&a);
            out.push(a);
        }
        tokio::time::sleep(Duration::from_millis(every_ms)).await;
    }
    out
}

// ------------------------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item1_a_lookup_that_finds_nothing_while_the_post_is_held_fails_nothing() {
    // GIVEN a provider that holds a POST 3 s, shows the transfer only once it has processed it,
    // and does not dedupe by reference; payhook gives up on a call after 1 s and records a 6 s
    // visibility window for it
    let store = store("pp_absence").await;
    let timing = Timing {
        lease_ms: 8_000,
        bound_ms: 1_000,
        visibility_ms: 6_000,
    };
    let (url, fake) = fake_provider(
        Behaviour {
            hold_ms: 3_000,
            commits_after_answering: true,
            dedupes: false,
            ..PATIENT
        },
        timing,
    )
    .await;
    let s = serve(&store, &url, timing, &[]).await;
    fund(&app(store.clone(), 30_000), "wallet_1", 1_000).await;

    // WHEN a payout of 400 times out, and its key is retried every 300 ms for 12 s (through
    // the fence, the provider's processing, and lookups that find nothing)
    let first = pay(&s, "abs-1", "wallet_1", 400).await;
    assert_eq!(
        (first.status, first.body["status"].as_str(), first.replayed),
        (202, Some("sent"), false)
    );
    let payout = first.payout();
    let answers = retry_for(&s, "abs-1", "wallet_1", 400, 300, 12_000, |a| {
        assert_eq!(a.payout_status.as_deref(), Some("sent"), "{a:?}");
    })
    .await;

    // THEN the payout was never failed or credited back, one POST made one transfer, the money
    // sent is the money debited, and a lookup once the transfer showed made it accepted (201)
    let s1 = seen(&fake, &payout);
    assert_eq!(
        (s1.posts, s1.transfers, s1.sent_minor),
        (1, 1, 400),
        "{s1:?}"
    );
    assert!(s1.gets >= 1, "{s1:?}");
    assert_eq!(balance(&store, "wallet_1").await, 600);
    assert!(
        answers.iter().all(|a| a.replayed),
        "only the first answered first-hand"
    );
    assert_eq!(answers.last().map(|a| a.status), Some(201), "{answers:?}");
    // AND the 600 left cannot pay 1,000
    let more = pay(&s, "abs-2", "wallet_1", 1_000).await;
    assert_eq!(
        (
            more.status,
            more.body["error"].as_str(),
            more.body["available"].as_i64()
        ),
        (422, Some("insufficient_funds"), Some(600))
    );
    // AND the provider's success settles it once: still 600, and never below zero
    assert_eq!(
        generic_word(&s, "transfer.succeeded", &payout, 400, 1)
            .await
            .status,
        200
    );
    let done = pay(&s, "abs-1", "wallet_1", 400).await;
    assert_eq!(
        (
            done.status,
            done.payout_status.as_deref(),
            done.body["status"].as_str()
        ),
        (201, Some("paid"), Some("paid"))
    );
    assert_eq!(balance(&store, "wallet_1").await, 600);
    assert_eq!(total_posts(&fake), 1);
    assert!(fake.lock().unwrap().overlaps.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_a_takeover_never_calls_while_the_killed_call_may_run() {
    // GIVEN a provider that holds a POST 6 s (past payhook's 2 s bound), commits after
    // answering and does not dedupe; a payout request is killed (SIGKILL) mid-call
    let store = store("pp_takeover").await;
    let timing = Timing {
        lease_ms: 8_000,
        bound_ms: 2_000,
        visibility_ms: 10_000,
    };
    let (url, fake) = fake_provider(
        Behaviour {
            hold_ms: 6_000,
            commits_after_answering: true,
            dedupes: false,
            ..PATIENT
        },
        timing,
    )
    .await;
    fund(&app(store.clone(), 30_000), "wallet_2", 1_000).await;
    let first = serve(&store, &url, timing, &[]).await;
    let port = first.port;
    let request = tokio::spawn(async move {
        let auth = format!("Bearer {TOKEN}");
        http(
            port,
            "POST",
            "/payouts",
            &[("authorization", &auth), ("idempotency-key", "take-1")],
            &payout_body("wallet_2", 400),
        )
        .await
    });
    for _ in 0..200 {
        if total_posts(&fake) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(total_posts(&fake), 1, "the transfer call was made");
    drop(first);
    assert!(request.await.unwrap().is_none_or(|a| a.status >= 500));

    // WHEN another process serves the key's retries every 250 ms for 18 s (the lease expires
    // at 8 s and the claim is taken over; the provider processes the POST at 6 s)
    let s = serve(&store, &url, timing, &[]).await;
    let answers = retry_for(&s, "take-1", "wallet_2", 400, 250, 18_000, |a| {
        assert!(matches!(a.status, 201 | 202 | 409), "{a:?}");
        assert_eq!(
            total_posts(&fake),
            1,
            "a second call while the first may run"
        );
    })
    .await;

    // THEN one POST, one transfer of 400 against one debit of 400, and exactly one answer
    // first-hand (the takeover's); the last retry found the transfer
    let payout = answers
        .iter()
        .map(Answer::payout)
        .find(|p| !p.is_empty())
        .unwrap();
    let s2 = seen(&fake, &payout);
    assert_eq!(
        (s2.posts, s2.transfers, s2.sent_minor),
        (1, 1, 400),
        "{s2:?}"
    );
    assert_eq!(balance(&store, "wallet_2").await, 600);
    let first_hand = answers
        .iter()
        .filter(|a| a.status != 409 && !a.replayed)
        .count();
    assert_eq!(first_hand, 1, "{answers:?}");
    assert_eq!(answers.last().map(|a| a.status), Some(201), "{answers:?}");
    assert!(
        fake.lock().unwrap().overlaps.is_empty(),
        "{:?}",
        fake.lock().unwrap().overlaps
    );

    // AND a process whose lease a call would outlive does not start (issue #42, case 4: it
    // used to answer 201 reserved, debit, and never send), saying why with its numbers
    let short = Timing {
        lease_ms: 1_500,
        bound_ms: 3_000,
        visibility_ms: 10_000,
    };
    let before = balance(&store, "wallet_2").await;
    let posts = total_posts(&fake);
    let why = serve_refused(&store, &url, short, &[]);
    assert!(
        why.contains("no transfer call can start") && why.contains("1500 ms"),
        "{why}"
    );
    assert_eq!(balance(&store, "wallet_2").await, before);
    assert_eq!(total_posts(&fake), posts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_a_refusal_is_asked_about_once_then_failed_within_the_bound() {
    // GIVEN a provider that refuses every transfer with 400 after 500 ms
    let store = store("pp_refusal").await;
    let roomy = Timing {
        lease_ms: 10_000,
        bound_ms: 2_000,
        visibility_ms: 10_000,
    };
    let (url, fake) = fake_provider(
        Behaviour {
            hold_ms: 500,
            dedupes: false,
            refuses: Some(400),
            ..PATIENT
        },
        roomy,
    )
    .await;
    fund(&app(store.clone(), 30_000), "wallet_3", 1_000).await;
    let s = serve(&store, &url, roomy, &[]).await;

    // WHEN a payout is refused
    let started = Instant::now();
    let a = pay(&s, "ref-1", "wallet_3", 300).await;
    let took = started.elapsed();
    // THEN one POST and one lookup, failed, credited back, answered inside the lease
    one_story(&a);
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (201, Some("failed")),
        "{a:?}"
    );
    let s3 = seen(&fake, &a.payout());
    assert_eq!((s3.posts, s3.gets, s3.transfers), (1, 1, 0), "{s3:?}");
    assert_eq!(balance(&store, "wallet_3").await, 1_000);
    assert!(took < Duration::from_millis(roomy.lease_ms), "{took:?}");

    // WHEN the budget leaves no room for the question after the refusal
    drop(s);
    let slower = Behaviour {
        hold_ms: 1_800,
        ..fake.lock().unwrap().behaviour
    };
    fake.lock().unwrap().behaviour = slower;
    // The lease fits one call (2 s) with the clock's second, the second after it, and up to
    // 1.7 s for the writes before it: not a second call after a refusal that took 1.8 s.
    let tight = Timing {
        lease_ms: 5_700,
        bound_ms: 2_000,
        visibility_ms: 10_000,
    };
    let s = serve(&store, &url, tight, &[]).await;
    let started = Instant::now();
    let a = pay(&s, "ref-2", "wallet_3", 300).await;
    let took = started.elapsed();
    // THEN it answers inside the lease, unresolved (202), nothing asked, nothing credited yet
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (202, Some("sent")),
        "{a:?}"
    );
    assert!(took < Duration::from_millis(tight.lease_ms), "{took:?}");
    let payout = a.payout();
    assert_eq!(
        (seen(&fake, &payout).posts, seen(&fake, &payout).gets),
        (1, 0)
    );
    assert_eq!(balance(&store, "wallet_3").await, 700);
    // AND a retry past the fence asks once and fails it, with no second POST
    tokio::time::sleep(Duration::from_millis(tight.fence_ms())).await;
    let b = pay(&s, "ref-2", "wallet_3", 300).await;
    assert_eq!(
        (b.status, b.replayed, b.body["status"].as_str()),
        (201, true, Some("failed")),
        "{b:?}"
    );
    assert_eq!(
        (seen(&fake, &payout).posts, seen(&fake, &payout).gets),
        (1, 1)
    );
    assert_eq!(balance(&store, "wallet_3").await, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item4_one_payout_tells_one_story_to_every_caller() {
    // GIVEN a provider that takes transfers at once (pending)
    let store = store("pp_story").await;
    let timing = Timing {
        lease_ms: 30_000,
        bound_ms: 1_000,
        visibility_ms: 1_000,
    };
    let (url, _fake) = fake_provider(PATIENT, timing).await;
    fund(&app(store.clone(), 30_000), "wallet_4", 1_000).await;
    let s = Arc::new(serve(&store, &url, timing, &[]).await);

    // WHEN eight callers send the same key at once
    let tasks = (0..8).map(|_| {
        let s = s.clone();
        tokio::spawn(async move { pay(&s, "story-1", "wallet_4", 250).await })
    });
    let answers: Vec<Answer> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // THEN exactly one answer is first-hand; every other is in flight (409) or replayed; each
    // body agrees with its Payout-Status
    answers.iter().for_each(one_story);
    let first_hand: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status != 409 && !a.replayed)
        .collect();
    assert_eq!(first_hand.len(), 1, "{answers:?}");
    let payout = first_hand[0].payout();

    // WHEN the provider's success arrives and the key is retried
    assert_eq!(
        generic_word(&s, "transfer.succeeded", &payout, 250, 1)
            .await
            .status,
        200
    );
    let again = pay(&s, "story-1", "wallet_4", 250).await;
    // THEN the replay says paid in its body and its header alike
    assert_eq!(
        (
            again.status,
            again.replayed,
            again.payout_status.as_deref(),
            again.body["status"].as_str()
        ),
        (201, true, Some("paid"), Some("paid"))
    );
    // AND the record carries the reference the POST answer named
    let auth = format!("Bearer {TOKEN}");
    let got = http(
        s.port,
        "GET",
        &format!("/payouts/{payout}"),
        &[("authorization", &auth)],
        "",
    )
    .await
    .unwrap();
    assert_eq!(
        (
            got.status,
            got.body["reference"].as_str(),
            first_hand[0].body["reference"].as_str()
        ),
        (200, Some(payout.as_str()), Some(payout.as_str()))
    );
    assert_eq!(balance(&store, "wallet_4").await, 750);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item5_a_word_from_another_provider_or_about_other_money_moves_nothing() {
    // GIVEN a payout of 400 sent through the generic provider and paid
    let store = store("pp_provenance").await;
    let timing = Timing {
        lease_ms: 30_000,
        bound_ms: 1_000,
        visibility_ms: 1_000,
    };
    let (url, _fake) = fake_provider(PATIENT, timing).await;
    fund(&app(store.clone(), 30_000), "wallet_5", 1_000).await;
    let s = serve(&store, &url, timing, &[]).await;
    let a = pay(&s, "prov-1", "wallet_5", 400).await;
    let payout = a.payout();
    assert_eq!(
        generic_word(&s, "transfer.succeeded", &payout, 400, 1)
            .await
            .status,
        200
    );
    assert_eq!(balance(&store, "wallet_5").await, 600);

    // WHEN a Paystack-signed transfer.reversed names it, and a Paystack transfer.failed names
    // it with 1 USD
    for (event, amount, currency) in [
        ("transfer.reversed", 400, "NGN"),
        ("transfer.failed", 1, "USD"),
    ] {
        let body = json!({"event": event, "data": {"reference": payout, "amount": amount,
            "currency": currency, "status": event.trim_start_matches("transfer."), "id": 7}})
        .to_string();
        let r = paystack_webhook(&s, &body).await;
        // THEN each is answered 200 (the sender stops), a conflict, and moves nothing
        assert_eq!(
            (r.status, r.body["status"].as_str()),
            (200, Some("conflict")),
            "{event}: {:?}",
            r.body
        );
    }
    assert_eq!(balance(&store, "wallet_5").await, 600);
    // WHEN the payout's own provider reverses it naming other money
    let wrong = generic_word(&s, "transfer.reversed", &payout, 999, 2).await;
    assert_eq!(
        (wrong.status, wrong.body["status"].as_str()),
        (200, Some("conflict"))
    );
    assert_eq!(balance(&store, "wallet_5").await, 600);
    // THEN its word with the payout's money still applies (the conflict left its key free)
    let right = generic_word(&s, "transfer.reversed", &payout, 400, 3).await;
    assert_eq!(
        (right.status, right.body["status"].as_str()),
        (200, Some("applied"))
    );
    assert_eq!(balance(&store, "wallet_5").await, 1_000);
    let shown = pay(&s, "prov-1", "wallet_5", 400).await;
    assert_eq!(shown.payout_status.as_deref(), Some("reversed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item6_a_retry_after_a_credential_change_names_the_same_payout() {
    let store = store("pp_callers").await;
    let timing = Timing {
        lease_ms: 30_000,
        bound_ms: 1_000,
        visibility_ms: 1_000,
    };
    let (url, fake) = fake_provider(PATIENT, timing).await;
    fund(&app(store.clone(), 30_000), "wallet_6", 2_000).await;
    // GIVEN a payout made with the old token
    let old = serve(&store, &url, timing, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let first = pay_with(&old, TOKEN, "rot-1", "wallet_6", 600)
        .await
        .unwrap();
    assert_eq!((first.status, first.replayed), (201, false));
    drop(old);
    // WHEN the token is rotated (the new one alone is valid) and the caller retries the key
    let rotated = serve(
        &store,
        &url,
        timing,
        &[("PAYHOOK_PAYOUT_TOKEN", OTHER_TOKEN)],
    )
    .await;
    assert_eq!(
        pay_with(&rotated, TOKEN, "rot-1", "wallet_6", 600)
            .await
            .unwrap()
            .status,
        403
    );
    let retry = pay_with(&rotated, OTHER_TOKEN, "rot-1", "wallet_6", 600)
        .await
        .unwrap();
    // THEN it is the same payout, replayed: one transfer, debited once
    assert_eq!((retry.payout(), retry.replayed), (first.payout(), true));
    assert_eq!(total_posts(&fake), 1);
    assert_eq!(balance(&store, "wallet_6").await, 1_400);
    drop(rotated);

    // GIVEN two named callers (one of them with two tokens, mid-rotation)
    let callers =
        format!("erp={TOKEN},{OTHER_TOKEN} shop=payout-token-for-the-provider-tests-0003");
    let s = serve(
        &store,
        &url,
        timing,
        &[("PAYHOOK_PAYOUT_CALLERS", &callers)],
    )
    .await;
    // WHEN each uses the same key, and erp uses both its tokens
    let erp = pay_with(&s, TOKEN, "same-key", "wallet_6", 100)
        .await
        .unwrap();
    let erp2 = pay_with(&s, OTHER_TOKEN, "same-key", "wallet_6", 100)
        .await
        .unwrap();
    let shop = pay_with(
        &s,
        "payout-token-for-the-provider-tests-0003",
        "same-key",
        "wallet_6",
        100,
    )
    .await
    .unwrap();
    // THEN erp's two tokens name one payout; shop's is another
    assert_eq!((erp2.payout(), erp2.replayed), (erp.payout(), true));
    assert_ne!(shop.payout(), erp.payout());
    assert_eq!(total_posts(&fake), 3);
    assert_eq!(balance(&store, "wallet_6").await, 1_200);

    // GIVEN a payout opened before callers were named (its id scoped by the token's digest)
    let legacy_caller = format!(
        "token:{}",
        payhook::http::ReadToken::new(TOKEN).unwrap().id()
    );
    let key = payhook::payouts::RequestKey::parse("before-names").unwrap();
    let legacy = payhook::payouts::PayoutId::derive(&legacy_caller, &key);
    let pipeline = payhook::pipeline::Pipeline::new(store.clone());
    let api = payhook::reconcile::HttpProviderApi::new(
        payhook::config::Config::from_lookup(|n| match n {
            "PAYHOOK_GENERIC_API_URL" => Some(url.clone()),
            "PAYHOOK_GENERIC_API_KEY" => Some("k_test".into()),
            _ => None,
        })
        .unwrap()
        .api_endpoints,
    )
    .unwrap()
    .with_timeout(Duration::from_millis(1_000));
    let supports = |_| true;
    let request = payhook::payouts::PayoutRequest::parse(
        payout_body("wallet_6", 50).as_bytes(),
        payhook::payouts::Limits {
            max_amount_minor: 1_000_000,
            supports: &supports,
        },
    )
    .unwrap();
    let opened = pipeline
        .payout(
            &api,
            payhook::pipeline::PayoutCall {
                caller: &legacy_caller,
                key: &key,
                request: &request,
                lease_ms: 30_000,
                aliases: &[],
            },
        )
        .await
        .unwrap();
    assert_eq!(opened.payout.as_ref(), Some(&legacy));
    drop(s);
    // WHEN the same caller retries that key through the release that names callers
    let s = serve(&store, &url, timing, &[("PAYHOOK_PAYOUT_TOKEN", TOKEN)]).await;
    let retry = pay_with(&s, TOKEN, "before-names", "wallet_6", 50)
        .await
        .unwrap();
    // THEN it finds the payout it made, and sends nothing more
    assert_eq!((retry.payout(), retry.replayed), (legacy.to_string(), true));
    assert_eq!(total_posts(&fake), 4);
    assert_eq!(balance(&store, "wallet_6").await, 1_150);
}

#[test]
fn an_assumed_role_is_one_caller_whatever_its_session() {
    use payhook::http::payouts::iam_caller_name;
    let a = "arn:aws:sts::123456789012:assumed-role/payouts-worker/i-0abc";
    let b = "arn:aws:sts::123456789012:assumed-role/payouts-worker/task-7f3e";
    assert_eq!(iam_caller_name(a), iam_caller_name(b));
    assert_eq!(
        iam_caller_name(a),
        "arn:aws:sts::123456789012:assumed-role/payouts-worker"
    );
    assert_ne!(
        iam_caller_name(a),
        iam_caller_name("arn:aws:sts::123456789012:assumed-role/other-role/i-0abc")
    );
    let user = "arn:aws:iam::123456789012:user/ops";
    assert_eq!(iam_caller_name(user), user);
}
