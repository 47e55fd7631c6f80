//! The read routes through the real router against dynalite: the numbers after credits, refunds
//! and entries in several ledger shards; who may read (IAM identity in Lambda, loopback or a
//! bearer token under `payhook serve`); delivery pages exact across pages; and how many
//! DynamoDB calls a balance read makes (bounded by shards, not by history).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use common::*;
use payhook::cli::serve_read_access;
use payhook::domain::{AccountId, Currency, IdempotencyKey, Reference};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::DynamoStore;
use payhook::eventlog::{EventLog, LogFilter};
use payhook::http::{App, ReadAccess, ReadToken};
use payhook::ledger::{Balance, Layout, Ledger, Posting};
use serde_json::{json, Value};

const TOKEN: &str = "test-read-token-0123456789abcdef";

/// A GET as API Gateway hands it to the function: the sample event `events/read/{sample}`
/// (with its IAM authorizer context, or without one) pointed at `path_and_query`, converted by
/// lambda_http exactly as the Lambda runtime converts it.
fn via_api_gateway(sample: &str, path_and_query: &str) -> Request<Body> {
    let file = format!("{}/events/read/{sample}", env!("CARGO_MANIFEST_DIR"));
    let mut event: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    event["rawPath"] = json!(path);
    event["rawQueryString"] = json!(query);
    event["requestContext"]["http"]["path"] = json!(path);
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let (parts, body) = req.into_parts();
    Request::from_parts(parts, Body::from(body.to_vec()))
}

/// A read signed by an IAM caller, as API Gateway's AWS_IAM authorizer passes it on.
fn iam_get(path_and_query: &str) -> Request<Body> {
    via_api_gateway("account_balance.json", path_and_query)
}

fn plain_get(path_and_query: &str, bearer: Option<&str>) -> Request<Body> {
    let mut b = Request::get(path_and_query).header("host", "127.0.0.1:8080");
    if let Some(t) = bearer {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(Body::empty()).unwrap()
}

fn with_access(store: DynamoStore, access: ReadAccess) -> Arc<App<DynamoStore>> {
    let mut app = app(store, 30_000);
    Arc::get_mut(&mut app).unwrap().read_access = access;
    app
}

fn ngn() -> Currency {
    Currency::parse("NGN").unwrap()
}

/// References whose credits land in different ledger shards of the default layout.
fn references_in_distinct_shards(n: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut refs = Vec::new();
    for i in 0.. {
        let r = format!("pay_shard_{i}");
        let key = IdempotencyKey::from_stored(format!("generic:payment:{r}"));
        if seen.insert(Layout::default().place(&key)) {
            refs.push(r);
        }
        if refs.len() == n {
            break;
        }
    }
    refs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_route_answers_the_ledger_s_numbers_after_credits_refunds_and_shards() {
    // GIVEN three NGN credits to one account whose entries land in three ledger shards, one USD
    // credit, and a partial refund of the first payment
    let store = store("read_numbers").await;
    let app = app(store.clone(), 30_000);
    let refs = references_in_distinct_shards(3);
    for (i, (r, amount)) in refs.iter().zip([125_000, 30_000, 7_000]).enumerate() {
        let body = payment_body(&format!("evt_n{i}"), r, "wallet_r", amount, "NGN");
        assert_eq!(send(&app, signed(&body)).await.status, 200);
    }
    assert_eq!(
        send(
            &app,
            signed(&payment_body(
                "evt_usd", "pay_usd", "wallet_r", 5_000, "USD"
            ))
        )
        .await
        .status,
        200
    );
    let refund = event_body(
        "evt_rf",
        "refund.succeeded",
        json!({"reference": "rf_1", "payment_reference": refs[0], "amount": 25_000, "currency": "NGN"}),
    );
    assert_eq!(send(&app, signed(&refund)).await.status, 200);
    // a duplicate of the first credit changes nothing but is logged
    let dup = payment_body("evt_n0_again", &refs[0], "wallet_r", 125_000, "NGN");
    assert!(send(&app, signed(&dup)).await.replayed);

    // WHEN the balance is read over HTTP by an IAM caller
    let before = payhook::domain::now_ms();
    let r = send(&app, iam_get("/accounts/wallet_r/balance")).await;
    let after = payhook::domain::now_ms();

    // THEN it is the sum of the movements, per currency, with its entry count and time
    assert_eq!(r.status, 200, "{}", r.body);
    let b = r.json();
    assert_eq!(b["account"], "wallet_r");
    assert_eq!(
        b["balances"],
        json!({"NGN": 125_000 + 30_000 + 7_000 - 25_000, "USD": 5_000})
    );
    assert_eq!(b["entries"], 5);
    let as_of = b["as_of_ms"].as_i64().unwrap();
    assert!(
        (before..=after).contains(&as_of),
        "{as_of} not in {before}..={after}"
    );
    assert!(
        b.get("postings").is_none(),
        "the route never lists the history"
    );
    // AND it is what the CLI path prints, and what summing every entry of the history gives
    let acct = AccountId::parse("wallet_r").unwrap();
    let cli = payhook::read::balance(&store, &acct, true).await.unwrap();
    assert_eq!(json!(cli.balances), b["balances"]);
    let postings = cli.postings.unwrap();
    let shards: BTreeSet<u32> = postings.iter().map(|p| p.shard).collect();
    assert!(shards.len() >= 3, "entries in shards {shards:?}");
    let summed = Balance::from_postings(acct, &postings).unwrap();
    assert_eq!(json!(summed.balances), b["balances"]);
    assert_eq!(summed.entries, 5);

    // WHEN the refunded payment is read
    let p = send(&app, iam_get(&format!("/payments/generic/{}", refs[0]))).await;
    // THEN it shows state, money, refunded total, history and its deliveries, newest first
    assert_eq!(p.status, 200, "{}", p.body);
    let v = p.json();
    assert_eq!(v["payment"]["status"], "PARTIALLY_REFUNDED");
    assert_eq!(
        (
            v["payment"]["amount_minor"].as_i64(),
            v["payment"]["currency"].as_str()
        ),
        (Some(125_000), Some("NGN"))
    );
    assert_eq!(v["payment"]["refunded_minor"], 25_000);
    assert_eq!(v["payment"]["account"], "wallet_r");
    let statuses: Vec<&str> = v["payment"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["PAID", "PARTIALLY_REFUNDED"]);
    let events: Vec<&str> = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["evt_n0_again", "evt_rf", "evt_n0"]);
    let outcomes: Vec<&str> = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["replayed", "applied", "applied"]);
    assert!(
        v["deliveries"][0].get("raw_body").is_none(),
        "bodies are never served"
    );
    assert_eq!(v["next_cursor"], Value::Null);

    // AND the delivery listing by reference holds the same deliveries
    let d = send(
        &app,
        iam_get(&format!(
            "/deliveries?reference={}&provider=generic",
            refs[0]
        )),
    )
    .await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.json()["deliveries"], v["deliveries"]);

    // AND what does not exist is 404, what cannot be read is 400, in the webhook answers' shape
    for (path, status, code) in [
        ("/accounts/nobody/balance", 404, "not_found"),
        ("/payments/generic/never_seen", 404, "not_found"),
        ("/payments/acme/pay_1", 404, "unknown_provider"),
        ("/deliveries?since=1", 400, "invalid_field"),
        ("/deliveries?reference=pay_1&limit=0", 400, "invalid_field"),
        (
            "/deliveries?reference=pay_1&limit=501",
            400,
            "invalid_field",
        ),
        ("/deliveries?outcome=bogus", 400, "invalid_field"),
        (
            "/deliveries?reference=pay_1&cursor=abc",
            400,
            "invalid_field",
        ),
        ("/deliveries?outcome=failed", 400, "invalid_field"),
        ("/deliveries?since_ms=10&until_ms=5", 400, "invalid_field"),
    ] {
        let r = send(&app, iam_get(path)).await;
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (status, Some(code)),
            "{path}: {}",
            r.body
        );
        assert!(r.json()["message"].is_string(), "{path}: {}", r.body);
    }
    assert_eq!(
        send(&app, iam_get("/deliveries?limit=x")).await.json()["field"],
        "limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_an_iam_identity_in_lambda_and_a_token_under_serve_with_read_api() {
    // GIVEN an account with one credit
    let store = store("read_auth").await;
    let iam = app(store.clone(), 30_000);
    assert_eq!(
        send(
            &iam,
            signed(&payment_body("evt_a", "pay_a", "wallet_a", 100, "NGN"))
        )
        .await
        .status,
        200
    );
    let paths = [
        "/accounts/wallet_a/balance",
        "/payments/generic/pay_a",
        "/deliveries?reference=pay_a",
    ];

    // WHEN the Lambda's router (the default, fail-closed access) gets reads
    for path in paths {
        // THEN with the IAM caller API Gateway passes on: 200
        assert_eq!(send(&iam, iam_get(path)).await.status, 200, "{path}");
        // AND through API Gateway without an IAM identity (a route deployed without AWS_IAM): 403
        let r = send(
            &iam,
            via_api_gateway("account_balance_no_identity.json", path),
        )
        .await;
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (403, Some("forbidden")),
            "{path}"
        );
        // AND with no request context at all, even bearing the token: 403
        assert_eq!(
            send(&iam, plain_get(path, Some(TOKEN))).await.status,
            403,
            "{path}"
        );
    }
    // AND the webhook route still needs no identity (its signature is its authentication)
    assert!(
        send(
            &iam,
            signed(&payment_body("evt_a", "pay_a", "wallet_a", 100, "NGN"))
        )
        .await
        .replayed
    );

    // WHEN `payhook serve --read-api` gets reads
    let token = with_access(
        store.clone(),
        ReadAccess::Token(ReadToken::new(TOKEN).unwrap()),
    );
    for path in paths {
        // THEN the right bearer reads, a wrong one is 403, none is 401 with a challenge
        assert_eq!(
            send(&token, plain_get(path, Some(TOKEN))).await.status,
            200,
            "{path}"
        );
        let wrong = send(
            &token,
            plain_get(path, Some("test-read-token-0123456789abcdeX")),
        )
        .await;
        assert_eq!(
            (wrong.status, wrong.json()["error"].as_str()),
            (403, Some("forbidden")),
            "{path}"
        );
        let none = payhook::http::router(token.clone());
        let res = tower::ServiceExt::oneshot(none, plain_get(path, None))
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "{path}");
        assert_eq!(res.headers().get("www-authenticate").unwrap(), "Bearer");
        // AND an IAM identity is no substitute for the token there
        assert_eq!(send(&token, iam_get(path)).await.status, 401, "{path}");
        // AND the scheme is case-insensitive, the token is not
        let lower = Request::get(path)
            .header("authorization", format!("bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&token, lower).await.status, 200, "{path}");
        let upper = plain_get(path, Some(&TOKEN.to_uppercase()));
        assert_eq!(send(&token, upper).await.status, 403, "{path}");
    }

    // AND serve's access follows its address and flags
    let with_token = |t: Option<&str>| {
        payhook::config::Config::from_lookup(|n| {
            (n == "PAYHOOK_READ_TOKEN")
                .then(|| t.map(str::to_owned))
                .flatten()
        })
        .unwrap()
    };
    let local = "127.0.0.1:3000".parse().unwrap();
    let public = "0.0.0.0:3000".parse().unwrap();
    assert_eq!(
        serve_read_access(local, false, &with_token(None)).unwrap(),
        ReadAccess::Loopback
    );
    assert_eq!(
        serve_read_access(public, false, &with_token(Some(TOKEN))).unwrap(),
        ReadAccess::Off
    );
    assert!(
        serve_read_access(public, true, &with_token(None)).is_err(),
        "--read-api without a token"
    );
    assert!(matches!(
        serve_read_access(public, true, &with_token(Some(TOKEN))).unwrap(),
        ReadAccess::Token(_)
    ));
    let off = with_access(store.clone(), ReadAccess::Off);
    let loopback = with_access(store, ReadAccess::Loopback);
    for path in paths {
        assert_eq!(
            send(&off, plain_get(path, Some(TOKEN))).await.status,
            403,
            "{path}"
        );
        assert_eq!(
            send(&loopback, plain_get(path, None)).await.status,
            200,
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_pages_neither_repeat_nor_skip_a_delivery() {
    // GIVEN 17 deliveries of one reference (a credit and 16 duplicates) and 9 other payments,
    // logged over the test layout's index shards
    let store = store("read_pages").await;
    let app = app(store.clone(), 30_000);
    let since = payhook::domain::now_ms() - 60_000;
    for i in 0..17 {
        let body = payment_body(&format!("evt_p{i}"), "pay_many", "wallet_p", 10, "NGN");
        assert_eq!(send(&app, signed(&body)).await.status, 200);
    }
    for i in 0..9 {
        let body = payment_body(
            &format!("evt_o{i}"),
            &format!("pay_o{i}"),
            "wallet_p",
            10,
            "NGN",
        );
        assert_eq!(send(&app, signed(&body)).await.status, 200);
    }
    let all = store
        .query(&LogFilter::default(), 1_000, None)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(all.len(), 26);

    // WHEN each listing is walked page by page with its cursor
    for (query, want) in [
        ("reference=pay_many&limit=5".to_owned(), 17),
        (format!("since_ms={since}&limit=4"), 26),
        (format!("outcome=replayed&since_ms={since}&limit=3"), 16),
        ("event_id=evt_p3&limit=1".to_owned(), 1),
    ] {
        let mut ids: Vec<String> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let path = match &cursor {
                Some(c) => format!("/deliveries?{query}&cursor={c}"),
                None => format!("/deliveries?{query}"),
            };
            let r = send(&app, iam_get(&path)).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            let page = r.json();
            let got = page["deliveries"].as_array().unwrap();
            let limit: usize = query.rsplit("limit=").next().unwrap().parse().unwrap();
            assert!(got.len() <= limit, "{path}: {} > {limit}", got.len());
            ids.extend(got.iter().map(|d| d["id"].as_str().unwrap().to_owned()));
            pages += 1;
            match page["next_cursor"].as_str() {
                Some(c) => {
                    assert!(!got.is_empty(), "{path}: an empty page with a cursor");
                    cursor = Some(c.to_owned());
                }
                None => break,
            }
            assert!(pages < 100, "{query}: no end");
        }
        // THEN every delivery of the listing comes once, newest first, none missing
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{query}: repeated ids across pages"
        );
        assert_eq!(ids.len(), want, "{query}: {ids:?}");
        assert!(
            ids.windows(2).all(|w| w[0] > w[1]),
            "{query}: not newest first"
        );
        // AND they are exactly the deliveries one big page of the log holds
        let filtered: Vec<String> = all
            .iter()
            .filter(
                |d| match query.split('&').next().unwrap().split_once('=').unwrap() {
                    ("reference", r) => d.reference.as_ref().is_some_and(|x| x.as_str() == r),
                    ("outcome", o) => d.outcome.as_str() == o,
                    ("event_id", e) => d.event_id == e,
                    _ => true,
                },
            )
            .map(|d| d.id.to_string())
            .collect();
        assert_eq!(
            ids.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            filtered,
            "{query}"
        );
    }
}

async fn post_old(store: &DynamoStore, account: &AccountId, i: usize, shard: u32) {
    let at_ms = payhook::domain::now_ms() - 600_000 + i as i64;
    let key = IdempotencyKey::from_stored(format!("generic:payment:h_{i}"));
    let posting = Posting {
        shard,
        at_ms: Some(at_ms),
        key,
        account: account.clone(),
        currency: ngn(),
        amount_minor: 3,
        reference: Reference::parse(&format!("h_{i}")).unwrap(),
        posted_at_ms: at_ms,
    };
    store.post(&posting).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_read_makes_calls_bounded_by_shards_not_by_history() {
    // GIVEN an account with 300 entries (ten minutes old, all in one shard) and one with 3
    let base = store("read_calls").await;
    let long = AccountId::parse("w_long").unwrap();
    let short = AccountId::parse("w_short").unwrap();
    for i in 0..300 {
        post_old(&base, &long, i, 0).await;
    }
    for i in 300..303 {
        post_old(&base, &short, i, 1).await;
    }
    let counter = RequestCounter::new();
    let app = app(
        store_with(&base, sdk_builder().interceptor(counter.clone())),
        30_000,
    );
    let shards = u64::from(base.layout().await.unwrap().ledger_shards);

    // WHEN the long account is read once (it rolls its checkpoint), then each is read over HTTP
    assert_eq!(
        send(&app, iam_get("/accounts/w_long/balance")).await.json()["entries"],
        300
    );
    let mut calls = Vec::new();
    for (acct, want) in [
        ("w_long", json!({"NGN": 900})),
        ("w_short", json!({"NGN": 9})),
    ] {
        counter.reset();
        let r = send(&app, iam_get(&format!("/accounts/{acct}/balance"))).await;
        assert_eq!(r.json()["balances"], want, "{}", r.body);
        calls.push(counter.snapshot());
    }

    // THEN each read is the layout, and per shard its checkpoint and one page of recent entries
    // (no write), whether the account has 3 entries or 300
    for c in &calls {
        assert_eq!(c.get("GetItem").copied(), Some(1 + shards), "{c:?}");
        assert_eq!(c.get("Query").copied(), Some(shards), "{c:?}");
        assert_eq!(
            c.keys()
                .filter(|op| *op != "GetItem" && *op != "Query")
                .count(),
            0,
            "{c:?}"
        );
    }
    assert_eq!(calls[0], calls[1]);
    eprintln!(
        "balance read: {:?} for 300 entries, {:?} for 3 ({shards} ledger shards)",
        calls[0], calls[1]
    );
}

/// One HTTP/1.1 request to `payhook serve` on `port` with the given `Host` and extra headers:
/// (status, body).
async fn raw(
    port: u16,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

#[tokio::test]
async fn serve_s_loopback_reads_answer_only_requests_addressed_to_a_loopback_host() {
    // GIVEN `payhook serve` on loopback (reads open to local callers) with one credited payment
    let store = store("serve_host").await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = payhook_env(
        &mut std::process::Command::new(env!("CARGO_BIN_EXE_payhook")),
        &store,
    )
    .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
    .env("RUST_LOG", "error")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let body = payment_body("e_host", "pay_host", "w_host", 700, "NGN");
    let signed_req = signed(&body);
    let sig: Vec<(String, String)> = signed_req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    let sig: Vec<(&str, &str)> = sig.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    // WHEN a provider's webhook arrives through a tunnel (its public name in Host)
    let (hook, answer) = raw(
        port,
        "POST",
        "/webhooks/generic",
        "hooks.example.com",
        &sig,
        &body,
    )
    .await;

    // THEN it is applied: Host does not matter to signed webhooks
    assert_eq!(hook, 200, "{answer}");

    // WHEN a page elsewhere reads through DNS rebinding (its own name in Host), or a page of
    // another site fires a request from the browser
    let reads = [
        "/accounts/w_host/balance",
        "/deliveries",
        "/payments/generic/pay_host",
    ];
    for path in reads {
        let (rebound, leaked) =
            raw(port, "GET", path, &format!("evil.example:{port}"), &[], "").await;
        let (cross, leaked2) = raw(
            port,
            "GET",
            path,
            &format!("127.0.0.1:{port}"),
            &[("sec-fetch-site", "cross-site")],
            "",
        )
        .await;

        // THEN neither gets an answer with data
        assert_eq!(rebound, 421, "{path}: {leaked}");
        assert_eq!(cross, 421, "{path}: {leaked2}");
        assert!(
            !leaked.contains("pay_host") && !leaked.contains("700"),
            "{leaked}"
        );
        assert!(
            !leaked2.contains("pay_host") && !leaked2.contains("700"),
            "{leaked2}"
        );
    }

    // AND a local caller addressing it by a loopback name reads the balance
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let (ok, balance) = raw(port, "GET", "/accounts/w_host/balance", &host, &[], "").await;
        assert_eq!(ok, 200, "{host}: {balance}");
        assert!(balance.contains("700"), "{balance}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
