//! The operator console over HTTP (its router, against dynalite, over deliveries made by real
//! signed webhooks): counts, filters and paging are exact, pages show what the read layer says,
//! replay's dry run writes nothing and its confirm applies a parked refund once, and a write
//! without the console's origin and token, or a request for another host, is refused.
//! tests/it/console_browser.rs drives the same pages in headless Chromium.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use common::console_seed::{seed, ACCOUNT};
use common::{app, counts, payment_body, store};
use http_body_util::BodyExt;
use payhook::console::source::StoreSource;
use payhook::console::{router, Console};
use payhook::domain::{AccountId, Currency};
use payhook::dynamodb::DynamoStore;
use payhook::ledger::Ledger;
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:9";
const ORIGIN: &str = "http://127.0.0.1:9";
const CSRF: &str = "csrf-token-of-the-console-tests";
/// The console's per-start access token, and the cookie its token URL sets.
const ACCESS: &str = "access-token-of-the-console-tests-0123456789abcdef";
const COOKIE: &str = "payhook_console_9=access-token-of-the-console-tests-0123456789abcdef";

fn console(store: &DynamoStore) -> Arc<Console<StoreSource<DynamoStore>>> {
    let config = common::config(30_000);
    Arc::new(Console {
        source: StoreSource {
            store: store.clone(),
            label: "test tables".into(),
        },
        replay: Some(payhook::runtime::ops(&config, store.clone()).unwrap()),
        csrf: CSRF.into(),
        origin: ORIGIN.into(),
        lease_ms: 30_000,
        pending_after_ms: 900_000,
        payout_unresolved_after_ms: 86_400_000,
        operator: "console:tests".into(),
        access: ACCESS.into(),
        done: Default::default(),
    })
}

struct Page {
    status: u16,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn call(c: &Arc<Console<StoreSource<DynamoStore>>>, req: Request<Body>) -> Page {
    let res = router(c.clone()).oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Page {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get(c: &Arc<Console<StoreSource<DynamoStore>>>, path: &str) -> Page {
    call(
        c,
        Request::get(path)
            .header("host", HOST)
            .header("cookie", COOKIE)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

async fn post(
    c: &Arc<Console<StoreSource<DynamoStore>>>,
    form: &str,
    origin: Option<&str>,
) -> Page {
    let mut req = Request::post("/replay")
        .header("host", HOST)
        .header("cookie", COOKIE)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let page = call(c, req.body(Body::from(form.to_owned())).unwrap()).await;
    // A confirm answers 303 to its result's own address (Post/Redirect/Get): follow it.
    match page.headers.get("location").and_then(|l| l.to_str().ok()) {
        Some(to) if page.status == 303 && to.starts_with("/replays/") => get(c, to).await,
        _ => page,
    }
}

/// The count the deliveries page shows for `outcome`.
fn count_of(body: &str, outcome: &str) -> Option<u64> {
    let marker = format!(r#"<span class="count" data-outcome="{outcome}">"#);
    let at = body.find(&marker)? + marker.len();
    body[at..].split('<').next()?.parse().ok()
}

/// The delivery ids a listing page links to, in order.
fn ids(body: &str) -> Vec<String> {
    body.split(r#"<a class="delivery" href="/deliveries/"#)
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

fn next_link(body: &str) -> Option<String> {
    let at = body.find(r#"id="next-page" href=""#)? + r#"id="next-page" href=""#.len();
    Some(body[at..].split('"').next()?.replace("&amp;", "&"))
}

async fn ngn(store: &DynamoStore) -> i64 {
    let b = store
        .balance(&AccountId::parse(ACCOUNT).unwrap())
        .await
        .unwrap();
    b.balances[&Currency::parse("NGN").unwrap()]
}

#[tokio::test]
async fn the_pages_show_what_the_read_layer_says_and_paging_is_exact() {
    // GIVEN four logged deliveries: applied, replayed, parked, applied (a forged one refused)
    let store = store("console_pages").await;
    let c = console(&store);
    seed(&app(store.clone(), 30_000)).await;
    // WHEN the deliveries page is read
    let page = get(&c, "/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.body);
    // THEN the counts are the window's, every page carries a script-free CSP
    assert_eq!(count_of(&page.body, "applied"), Some(2));
    assert_eq!(count_of(&page.body, "replayed"), Some(1));
    assert_eq!(count_of(&page.body, "parked"), Some(1));
    assert!(page.body.contains(r#"id="total">4<"#));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"));
    let all = ids(&page.body);
    assert_eq!(all.len(), 4);
    // AND a filter shows exactly its deliveries, and the form keeps what was asked
    let parked = get(&c, "/deliveries?outcome=parked&since=1h").await;
    assert_eq!(ids(&parked.body).len(), 1);
    assert!(
        parked.body.contains(r#"name="since" value="1h""#),
        "{}",
        parked.body
    );
    // AND its replay button names the whole selection, not the page
    assert!(
        parked
            .body
            .contains("Replay all 1 deliveries this filter selects, not only this page"),
        "{}",
        parked.body
    );
    // AND a filter that does not read is said above the form as it was filled in
    let wrong = get(&c, "/deliveries?outcome=parked&since=yesterdayish").await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert!(wrong.body.contains(r#"name="since" value="yesterdayish""#));
    assert!(
        wrong.body.contains(r#"<option value="parked" selected"#),
        "{}",
        wrong.body
    );
    assert!(parked.body.contains("rf_console_2") || parked.body.contains("pay_console_2"));
    // AND pages of one never skip or repeat
    let mut seen = Vec::new();
    let mut next = Some("/deliveries?limit=1".to_owned());
    while let Some(path) = next {
        let p = get(&c, &path).await;
        seen.extend(ids(&p.body));
        next = next_link(&p.body);
        assert!(seen.len() <= 4, "paging runs on: {seen:?}");
    }
    assert_eq!(seen, all, "newest first, each once");
    // AND a delivery page shows its raw body and links to its payment
    let one = get(&c, &format!("/deliveries/{}", all[0])).await;
    assert_eq!(one.status, 200, "{}", one.body);
    // byte for byte as it was sent (not re-serialised), so its signature can be checked
    let sent = payment_body("evt_console_2", "pay_console_2", ACCOUNT, 7_000, "NGN");
    let escaped = sent
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert!(
        one.body
            .contains(&format!(r#"<pre id="raw-body">{escaped}</pre>"#)),
        "{}",
        one.body
    );
    assert!(one
        .body
        .contains(r#"href="/payments/generic/pay_console_2""#));
    // AND the payment's timeline and the account's balance are the store's
    let pay = get(&c, "/payments/generic/pay_console_1").await;
    assert!(
        pay.body.contains(r#"<span id="status">PAID</span>"#),
        "{}",
        pay.body
    );
    assert!(pay.body.contains("100.00 NGN"));
    let acct = get(&c, &format!("/accounts/{ACCOUNT}")).await;
    assert_eq!(ngn(&store).await, 17_000);
    assert!(
        acct.body
            .contains(r#"data-currency="NGN" data-minor="17000""#),
        "{}",
        acct.body
    );
    assert!(acct
        .body
        .contains(r#"<span class="running">170.00 NGN</span>"#));
    // AND needs-attention lists the parked refund with what resolves it; traffic is drawn
    let att = get(&c, "/attention").await;
    assert!(
        att.body.contains(r#"data-outcome="parked">1<"#),
        "{}",
        att.body
    );
    // (its row says how much waits: the refund's 50.00 NGN)
    assert!(att.body.contains("<td>50.00 NGN</td>"), "{}", att.body);
    let traffic = get(&c, "/traffic?window=hour").await;
    assert_eq!(
        traffic
            .body
            .matches(r#"class="bar applied""#)
            .count()
            .min(1),
        1
    );
    assert!(traffic
        .body
        .contains("duplicates (replayed): 1 of 4 deliveries, 25.0%"));
    assert!(
        traffic.body.contains("<td>170.00 NGN</td>"),
        "{}",
        traffic.body
    );
    // AND unknown things are 404, unreadable ones 400
    assert_eq!(get(&c, "/payments/generic/pay_never").await.status, 404);
    assert_eq!(get(&c, "/deliveries/nonsense").await.status, 400);
}

#[tokio::test]
async fn replay_dry_run_writes_nothing_and_a_confirm_applies_a_parked_refund_once() {
    let store = store("console_replay").await;
    let c = console(&store);
    let seeded = seed(&app(store.clone(), 30_000)).await;
    let parked = get(&c, "/deliveries?outcome=parked&since=1h").await;
    let id = ids(&parked.body).remove(0);
    let before = counts(&store).await;
    // WHEN the dry run is asked for
    let form = format!("csrf={CSRF}&delivery={id}&step=preview");
    let dry = post(&c, &form, Some(ORIGIN)).await;
    // THEN it predicts the refund's application and writes nothing
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert!(
        dry.body
            .contains(&format!("applied generic:refund:{}", seeded.refund)),
        "{}",
        dry.body
    );
    assert!(dry.body.contains(r#"id="confirm""#));
    assert_eq!(counts(&store).await, before);
    assert_eq!(ngn(&store).await, 17_000);
    // WHEN it is confirmed, twice
    let form = format!("csrf={CSRF}&delivery={id}&step=confirm");
    let first = post(&c, &form, Some(ORIGIN)).await;
    assert!(
        first
            .body
            .contains("&quot;outcome&quot;: &quot;applied&quot;"),
        "{}",
        first.body
    );
    let second = post(&c, &form, Some(ORIGIN)).await;
    assert!(
        second
            .body
            .contains("&quot;outcome&quot;: &quot;replayed&quot;"),
        "{}",
        second.body
    );
    // AND a confirm answers 303 to its result's address (Back or a reload never re-sends it)
    let raw = call(
        &c,
        Request::post("/replay")
            .header("host", HOST)
            .header("cookie", COOKIE)
            .header("origin", ORIGIN)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(form.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(raw.status, 303, "{}", raw.body);
    let at = raw.headers["location"].to_str().unwrap().to_owned();
    assert!(at.starts_with("/replays/"), "{at}");
    assert_eq!(get(&c, &at).await.status, 200);
    assert_eq!(get(&c, "/replays/not-kept").await.status, 404);
    // THEN the refund debited once
    assert_eq!(ngn(&store).await, 17_000 - 5_000);
    // AND it no longer needs attention: its key was finished (the parked delivery stays in
    // the log as it was answered, and the page says one was finished since)
    let att = get(&c, "/attention").await;
    assert!(
        att.body.contains(r#"data-outcome="parked">0<"#),
        "{}",
        att.body
    );
    assert!(
        att.body
            .contains(r#"<p class="settled" data-outcome="parked">1 finished since"#),
        "{}",
        att.body
    );
    let pay = get(
        &c,
        &format!("/payments/generic/{}", seeded.refunded_payment),
    )
    .await;
    assert!(pay
        .body
        .contains(&format!("generic:refund:{}", seeded.refund)));
}

#[tokio::test]
async fn writes_need_the_console_origin_and_token_and_requests_its_host() {
    let store = store("console_csrf").await;
    let c = console(&store);
    seed(&app(store.clone(), 30_000)).await;
    let parked = get(&c, "/deliveries?outcome=parked&since=1h").await;
    let id = ids(&parked.body).remove(0);
    let before = counts(&store).await;
    let confirm = format!("csrf={CSRF}&delivery={id}&step=confirm");
    // A cross-site form post, one without origin facts, a wrong token: all refused.
    assert_eq!(
        post(&c, &confirm, Some("http://evil.example")).await.status,
        403
    );
    assert_eq!(post(&c, &confirm, None).await.status, 403);
    let wrong = format!("csrf=guess&delivery={id}&step=confirm");
    assert_eq!(post(&c, &wrong, Some(ORIGIN)).await.status, 403);
    assert_eq!(counts(&store).await, before, "a refused write wrote");
    assert_eq!(ngn(&store).await, 17_000);
    // A request for another host (DNS rebinding) is not served.
    let rebound = call(
        &c,
        Request::get("/deliveries")
            .header("host", "evil.example:9")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(rebound.status, 421);
    let distinct: BTreeSet<String> = ids(&get(&c, "/deliveries").await.body)
        .into_iter()
        .collect();
    assert_eq!(distinct.len(), 4);
}

/// A read API on loopback in front of the real router (reads open to loopback callers, as
/// `payhook serve` has them), recording the `Authorization` header of each request.
async fn read_api(store: &DynamoStore) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let mut app = common::app(store.clone(), 30_000);
    Arc::get_mut(&mut app).unwrap().read_access = payhook::http::read::ReadAccess::Loopback;
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let inner = payhook::http::router(app);
    let front = axum::Router::new().fallback(move |req: Request<Body>| {
        let (inner, record) = (inner.clone(), record.clone());
        async move {
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            record.lock().unwrap().push(auth);
            inner.oneshot(req).await.unwrap()
        }
    });
    (crate::common::serve_fake(front).await, seen)
}

#[tokio::test]
async fn over_a_read_api_the_pages_are_the_same_every_read_is_signed_and_nothing_writes() {
    // GIVEN the seeded tables behind a read API, and a console reading from it with SigV4
    let store = store("console_api").await;
    seed(&app(store.clone(), 30_000)).await;
    let (url, seen) = read_api(&store).await;
    let source = payhook::console::source::ApiSource::new(&url, Some("eu-west-1".into()))
        .await
        .unwrap();
    let c = Arc::new(Console {
        source,
        replay: None,
        csrf: CSRF.into(),
        origin: ORIGIN.into(),
        lease_ms: 30_000,
        pending_after_ms: 900_000,
        payout_unresolved_after_ms: 86_400_000,
        operator: "console:tests".into(),
        access: ACCESS.into(),
        done: Default::default(),
    });
    let call_api = |path: &'static str| {
        let c = c.clone();
        async move {
            let res = router(c)
                .oneshot(
                    Request::get(path)
                        .header("host", HOST)
                        .header("cookie", COOKIE)
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    // WHEN its pages are read
    let (status, list) = call_api("/deliveries").await;
    assert_eq!(status, 200, "{list}");
    // THEN they show what the store-backed console shows
    assert_eq!(count_of(&list, "applied"), Some(2));
    assert_eq!(count_of(&list, "parked"), Some(1));
    assert_eq!(ids(&list).len(), 4);
    let (_, pay) = call_api("/payments/generic/pay_console_1").await;
    assert!(pay.contains(r#"<span id="status">PAID</span>"#), "{pay}");
    let (_, acct) = call_api("/accounts/wallet_console").await;
    assert!(acct.contains(r#"data-minor="17000""#), "{acct}");
    assert!(acct.contains("the read API serves balances, not entries"));
    // AND no replay is offered, and none is taken
    assert!(!list.contains("replay-filtered"));
    let before = counts(&store).await;
    let res = router(c.clone())
        .oneshot(
            Request::post("/replay")
                .header("host", HOST)
                .header("cookie", COOKIE)
                .header("origin", ORIGIN)
                .body(Body::from(format!(
                    "csrf={CSRF}&step=confirm&outcome=parked"
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    assert_eq!(counts(&store).await, before);
    // AND every request the read API got was SigV4-signed for execute-api
    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 3);
    for auth in seen.iter() {
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=")
                && auth.contains("/eu-west-1/execute-api/aws4_request"),
            "{auth}"
        );
    }
}

#[tokio::test]
async fn payouts_that_need_a_person_are_on_the_attention_page() {
    // GIVEN an open payout, and a console whose horizon it has passed
    let store = store("console_payouts").await;
    let id = common::console_seed::open_payout(&store, "attention-1").await;
    let mut c = Arc::try_unwrap(console(&store)).ok().unwrap();
    c.payout_unresolved_after_ms = 0;
    // WHEN the operator opens needs attention
    let page = get(&Arc::new(c), "/attention").await;
    // THEN the payout is listed with why, and what to do
    assert_eq!(page.status, 200);
    assert!(page.body.contains(id.as_str()), "{}", page.body);
    assert!(page.body.contains("not settled past the horizon"));
    assert!(page.body.contains(&format!("payhook payouts show {id}")));
    // AND the payouts page lists it, and its filters are exact
    let c = console(&store);
    let listed = get(&c, "/payouts").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains(id.as_str()), "{}", listed.body);
    let mine = get(&c, "/payouts?account=wallet_p&status=new").await;
    assert!(
        mine.body.contains(r#"id="payout-count">1<"#),
        "{}",
        mine.body
    );
    let other = get(&c, "/payouts?account=wallet_q").await;
    assert!(
        other.body.contains(r#"id="payout-count">0<"#),
        "{}",
        other.body
    );
    // AND the search box finds it by its id, with its account
    let found = get(&c, &format!("/search?q={id}")).await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(found.body.contains("<h2>Payout</h2>"), "{}", found.body);
    assert!(found.body.contains(r#"href="/accounts/wallet_p""#));
}

/// #33 item 4: one box finds what an operator holds, each reading an exact lookup.
#[tokio::test]
async fn one_search_box_finds_references_events_accounts_and_deliveries() {
    // GIVEN the seeded deliveries
    let store = store("console_search").await;
    let c = console(&store);
    seed(&app(store.clone(), 30_000)).await;
    // WHEN a payment reference is searched
    let by_ref = get(&c, "/search?q=pay_console_1").await;
    // THEN its payment (with account) and its deliveries are found, linking onward
    assert_eq!(by_ref.status, 200, "{}", by_ref.body);
    assert!(
        by_ref.body.contains(r#"id="found-payments""#),
        "{}",
        by_ref.body
    );
    assert!(by_ref
        .body
        .contains(r#"href="/payments/generic/pay_console_1""#));
    assert!(by_ref
        .body
        .contains(&format!(r#"href="/accounts/{ACCOUNT}""#)));
    assert_eq!(
        ids(&by_ref.body).len(),
        2,
        "delivered twice: {}",
        by_ref.body
    );
    // AND a provider event id finds its deliveries, an account its page
    let by_event = get(&c, "/search?q=evt_console_2").await;
    assert!(
        by_event.body.contains(r#"id="found-by-event""#),
        "{}",
        by_event.body
    );
    let by_account = get(&c, &format!("/search?q={ACCOUNT}")).await;
    assert!(
        by_account.body.contains("<h2>Account</h2>"),
        "{}",
        by_account.body
    );
    // AND a delivery id finds that delivery
    let listed = get(&c, "/deliveries?since=1h").await;
    let one = ids(&listed.body).remove(0);
    let by_id = get(&c, &format!("/search?q={one}")).await;
    assert!(
        by_id.body.contains(r#"id="found-delivery""#),
        "{}",
        by_id.body
    );
    // AND a payment that named no account (so none was recorded) lands on a page that says
    // what to do next, with what arrived under its reference
    let no_account = common::event_body(
        "evt_noacct",
        "payment.succeeded",
        serde_json::json!({"reference": "pay_noacct", "amount": 500, "currency": "NGN"}),
    );
    let app = app(store.clone(), 30_000);
    assert_eq!(
        common::send(&app, common::signed(&no_account)).await.status,
        200
    );
    let missing = get(&c, "/payments/generic/pay_noacct").await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(
        missing.body.contains(r#"id="next-step""#)
            && missing.body.contains("payhook payments expect"),
        "{}",
        missing.body
    );
    assert_eq!(ids(&missing.body).len(), 1, "{}", missing.body);
    // AND what matches nothing says so, and what to try
    let none = get(&c, "/search?q=ord_7731").await;
    assert_eq!(none.status, 200);
    assert!(
        none.body.contains(r#"class="nothing""#) || none.body.contains("nothing has this"),
        "{}",
        none.body
    );
}

#[tokio::test]
async fn a_page_of_another_site_cannot_make_the_console_read() {
    // GIVEN the console over seeded tables
    let store = store("console_cross_site").await;
    let c = console(&store);
    seed(&app(store.clone(), 30_000)).await;

    // WHEN a page of another site makes the operator's browser fetch console pages (`<img>`
    // tags: a cross-site or same-site GET carrying the console's Host)
    for site in ["cross-site", "same-site"] {
        for path in ["/traffic?window=day", "/deliveries", "/attention"] {
            let res = call(
                &c,
                Request::get(path)
                    .header("host", HOST)
                    .header("sec-fetch-site", site)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;

            // THEN it is refused before any read: nothing of the log in the answer
            assert_eq!(res.status, 403, "{site} {path}: {}", res.body);
            assert!(!res.body.contains("pay_console"), "{}", res.body);
        }
    }
    // AND the operator's own navigation (same-origin, or typed: none) still works
    for site in ["same-origin", "none"] {
        let res = call(
            &c,
            Request::get("/deliveries")
                .header("host", HOST)
                .header("cookie", COOKIE)
                .header("sec-fetch-site", site)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(res.status, 200, "{site}");
    }
}

#[tokio::test]
async fn without_the_access_token_nothing_is_read_or_written() {
    // GIVEN the console over seeded tables, and another local user who can reach its port and
    // knows everything but the access token (the CSRF token, the delivery ids)
    let store = store("console_token").await;
    let c = console(&store);
    seed(&app(store.clone(), 30_000)).await;
    let id = ids(&get(&c, "/deliveries").await.body).remove(0);
    let before = counts(&store).await;
    let request = |method: &str, path: &str, cookie: Option<&str>| {
        let mut r = Request::builder()
            .method(method)
            .uri(path)
            .header("host", HOST)
            .header("origin", ORIGIN)
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(cookie) = cookie {
            r = r.header("cookie", cookie);
        }
        let form = format!("csrf={CSRF}&delivery={id}&step=confirm");
        r.body(Body::from(if method == "POST" {
            form
        } else {
            String::new()
        }))
        .unwrap()
    };
    let wrong = "payhook_console_9=guess";
    let other_console = format!("payhook_console_10={ACCESS}");
    let detail = format!("/deliveries/{id}");

    // WHEN it asks for pages, a raw body, and confirms a replay: without the cookie, with a
    // wrong one, with another console's name, with a wrong token in the URL
    for cookie in [None, Some(wrong), Some(other_console.as_str())] {
        for (method, path) in [
            ("GET", "/"),
            ("GET", detail.as_str()),
            ("GET", "/assets/console.css"),
            ("GET", "/deliveries?token=guess"),
            ("POST", "/replay"),
        ] {
            let res = call(&c, request(method, path, cookie)).await;

            // THEN each is refused and says nothing of the log
            assert_eq!(res.status, 401, "{method} {path} {cookie:?}: {}", res.body);
            assert!(
                !res.body.contains("pay_console") && !res.body.contains(CSRF),
                "{}",
                res.body
            );
        }
    }
    assert_eq!(counts(&store).await, before, "a refused request wrote");

    // WHEN the operator opens the printed URL
    let entry = call(
        &c,
        request("GET", &format!("/deliveries?since=1h&token={ACCESS}"), None),
    )
    .await;

    // THEN it sets the cookie (HttpOnly, SameSite=Strict) and drops the token from the address
    assert_eq!(entry.status, 303, "{}", entry.body);
    assert_eq!(entry.headers["location"], "/deliveries?since=1h");
    let set = entry.headers["set-cookie"].to_str().unwrap();
    assert_eq!(set, format!("{COOKIE}; HttpOnly; SameSite=Strict; Path=/"));
    // AND with that cookie the pages answer
    let page = call(&c, request("GET", "/deliveries?since=1h", Some(COOKIE))).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("pay_console"));
}

#[tokio::test]
async fn an_order_id_finds_its_payment_account_amount_and_what_each_delivery_was_told() {
    // GIVEN a payment for order ord_7731 (the merchant's id, in the payload's metadata), paid
    // into wallet_7 and delivered twice, and another order's payment
    let store = store("console_order").await;
    let c = console(&store);
    let app = app(store.clone(), 30_000);
    let paid = |event: &str, reference: &str, order: &str| {
        common::event_body(
            event,
            "payment.succeeded",
            serde_json::json!({"reference": reference, "account": "wallet_7", "amount": 123_456,
                "currency": "NGN", "metadata": {"order_id": order}}),
        )
    };
    let first = paid("evt_ord_1", "pay_ord_1", "ord_7731");
    let signed = common::signed(&first);
    let signature = signed.headers()["webhook-signature"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(common::send(&app, signed).await.status, 200);
    let again = common::send(&app, common::signed(&first)).await;
    assert!(again.replayed, "{again:?}");
    let other = paid("evt_ord_2", "pay_ord_2", "ord_9999");
    assert_eq!(common::send(&app, common::signed(&other)).await.status, 200);

    // WHEN the operator searches the order id
    let found = get(&c, "/search?q=ord_7731").await;

    // THEN both deliveries of that order are listed (and nothing of the other order), each row
    // with its amount and its account, linking to the account's page
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        found.body.contains(r#"id="found-by-order""#),
        "{}",
        found.body
    );
    assert_eq!(ids(&found.body).len(), 2, "{}", found.body);
    assert!(found.body.contains("1234.56 NGN"), "{}", found.body);
    assert!(found.body.contains(r#"href="/accounts/wallet_7""#));
    assert!(!found.body.contains("pay_ord_2"), "{}", found.body);
    // AND the deliveries page filters by it, outside any time window
    let listed = get(&c, "/deliveries?order_id=ord_7731").await;
    assert_eq!(ids(&listed.body).len(), 2, "{}", listed.body);
    // AND a row of the time listing (an index without amounts) shows them too
    let window = get(&c, "/deliveries?since=1h").await;
    assert!(window.body.contains("1234.56 NGN"), "{}", window.body);

    // WHEN a delivery of it is opened
    let one = get(&c, &format!("/deliveries/{}", ids(&found.body)[0])).await;
    // THEN it shows the order, the answer exactly as sent, and the headers that were verified
    // with the signature masked: its value appears nowhere
    assert_eq!(one.status, 200, "{}", one.body);
    assert!(
        one.body.contains(r#"href="/search?q=ord_7731""#),
        "{}",
        one.body
    );
    assert!(
        one.body.contains(r#"id="answer-body""#)
            && one.body.contains("&quot;status&quot;:&quot;applied&quot;"),
        "{}",
        one.body
    );
    assert!(one.body.contains("webhook-id: msg_test"), "{}", one.body);
    assert!(
        one.body
            .contains("webhook-signature: v1,\u{2022}\u{2022}\u{2022}\u{2022}"),
        "{}",
        one.body
    );
    let secret_part = signature.split(',').nth(1).unwrap();
    assert!(!one.body.contains(secret_part), "the signature leaked");
}

#[tokio::test]
async fn an_account_page_lists_a_hundred_entries_at_a_time_with_sums_that_end_at_the_balance() {
    // GIVEN an account with 130 credits of 1.00 to 1.30 NGN
    let store = store("console_account_pages").await;
    let c = console(&store);
    let app = app(store.clone(), 30_000);
    for i in 1..=130 {
        let body = payment_body(
            &format!("evt_acct_{i}"),
            &format!("pay_acct_{i:03}"),
            "wallet_pages",
            100 + i,
            "NGN",
        );
        assert_eq!(common::send(&app, common::signed(&body)).await.status, 200);
    }
    let balance: i64 = (1..=130).map(|i| 100 + i).sum();

    // WHEN the operator opens the account
    let first = get(&c, "/accounts/wallet_pages").await;

    // THEN the newest 100 entries are listed, the newest first with the balance as its sum
    assert_eq!(first.status, 200, "{}", first.body);
    let sums = |body: &str| -> Vec<String> {
        body.split(r#"<span class="running">"#)
            .skip(1)
            .map(|rest| rest.split('<').next().unwrap().to_owned())
            .collect()
    };
    let page_one = sums(&first.body);
    assert_eq!(page_one.len(), 100, "{}", first.body);
    assert_eq!(
        page_one[0],
        format!("{}.{:02} NGN", balance / 100, balance % 100)
    );
    assert!(first.body.contains("1 to 100 of 130"), "{}", first.body);
    // AND "older entries" lists the other 30, the oldest summing to its own amount (1.01)
    let marker = r#"id="older-entries" href=""#;
    let at = first.body.find(marker).unwrap() + marker.len();
    let older = first.body[at..]
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let second = get(&c, &older).await;
    let page_two = sums(&second.body);
    assert_eq!(page_two.len(), 30, "{}", second.body);
    assert_eq!(page_two.last().unwrap(), "1.01 NGN");
    assert!(second.body.contains("101 to 130 of 130"), "{}", second.body);
    assert!(!second.body.contains("older-entries"), "{}", second.body);
}
