//! The console in a real browser: `payhook console` (the binary) over tables filled by real
//! signed deliveries, driven through chromedriver in Debian's headless Chromium. The list shows
//! the right outcomes and counts, filters and paging are exact, a payment's timeline is in
//! order, the balance is `payhook balance`'s, the chart is drawn, a merchant order id typed in
//! the search box leads to its delivery (answer, masked headers), its payment and its account's
//! balance, replay's dry run then confirm applies a parked refund once (a second confirm changes
//! nothing) and needs attention stops listing it, a cross-site POST is refused, and a payout's
//! own page tells its timeline. Screenshots of each page land in target/console-screenshots/.
//!
//! Without Chromium and chromedriver this test says so on stderr and checks nothing, unless
//! `PAYHOOK_REQUIRE_BROWSER=1` (set by .ci/run, which installs them), where it fails instead.
//! scripts/test says which of the two happened.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::console_seed::{seed, ACCOUNT};
use common::webdriver::{browser, Browser};
use common::{app, payhook_env, store};
use payhook::dynamodb::DynamoStore;

/// `payhook console` on a free loopback port; killed on drop.
struct ConsoleProcess {
    child: Child,
    /// `http://127.0.0.1:PORT` (no token).
    url: String,
    /// The address it printed: the URL with its access token.
    entry: String,
}

impl ConsoleProcess {
    fn start(store: &DynamoStore) -> ConsoleProcess {
        let mut child = payhook_env(&mut Command::new(env!("CARGO_BIN_EXE_payhook")), store)
            .args(["console", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let entry = line.trim().to_owned();
        let (url, token) = entry.split_once("/?token=").unwrap_or_default();
        assert!(
            url.starts_with("http://127.0.0.1:") && token.len() >= 32,
            "console printed {line:?}"
        );
        ConsoleProcess {
            child,
            url: url.to_owned(),
            entry,
        }
    }
}

impl Drop for ConsoleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots")
}

/// `payhook balance ACCOUNT` as the CLI prints it: the NGN balance in minor units.
fn cli_balance(store: &DynamoStore) -> i64 {
    let out = payhook_env(&mut Command::new(env!("CARGO_BIN_EXE_payhook")), store)
        .args(["balance", ACCOUNT])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["balances"]["NGN"].as_i64().unwrap()
}

/// A page on another origin whose form posts to the console's replay with a real token.
async fn cross_site_page(console: &str, token: &str, delivery: &str) -> String {
    let html = format!(
        r#"<html><body><form method="post" action="{console}/replay"><input type="hidden" name="csrf" value="{token}"><input type="hidden" name="delivery" value="{delivery}"><input type="hidden" name="step" value="confirm"><button id="evil" type="submit">win a prize</button></form></body></html>"#
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_headless_chromium() {
    let Some((chromium, driver)) = browser() else {
        assert!(
            std::env::var("PAYHOOK_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "PAYHOOK_REQUIRE_BROWSER=1 but no chromium/chromedriver (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "SKIPPED: no chromium/chromedriver here, the console was not driven in a browser"
        );
        return;
    };
    // GIVEN tables filled by real signed deliveries, and the console binary over them
    let store = store("console_browser").await;
    let seeded = seed(&app(store.clone(), 30_000)).await;
    let console = ConsoleProcess::start(&store);
    let b = Browser::start(&chromium, &driver).await;
    let url = |path: &str| format!("{}{path}", console.url);

    // THEN a page without the access token is refused, and the printed address lets in
    b.goto(&url("/deliveries")).await;
    assert!(
        b.source().await.contains("access token"),
        "{}",
        b.source().await
    );
    b.goto(&console.entry).await;
    assert!(
        !b.current_url().await.contains("token="),
        "the token leaves the address bar"
    );
    // AND the deliveries page shows the outcomes and their counts
    b.goto(&url("/")).await;
    assert!(
        b.current_url().await.ends_with("/deliveries"),
        "/ redirects"
    );
    assert_eq!(b.text("#total").await, "4");
    assert_eq!(b.text(r#"span.count[data-outcome="applied"]"#).await, "2");
    assert_eq!(b.text(r#"span.count[data-outcome="replayed"]"#).await, "1");
    assert_eq!(b.text(r#"span.count[data-outcome="parked"]"#).await, "1");
    let outcomes = b.attrs("#deliveries tbody .badge", "data-outcome").await;
    assert_eq!(
        outcomes,
        ["applied", "parked", "replayed", "applied"],
        "newest first"
    );
    b.screenshot(&shots().join("deliveries.png")).await;

    // AND the filter form filters exactly
    b.goto(&url("/deliveries?outcome=parked&since=1h")).await;
    assert_eq!(b.all("#deliveries tbody tr").await.len(), 1);
    // The attribute as written (a path on the console).
    let parked_href = url(&b.attr("#deliveries a.delivery", "href").await);

    // AND paging one at a time visits each delivery once
    b.goto(&url("/deliveries?limit=1")).await;
    let mut visited = b.attrs("#deliveries a.delivery", "href").await;
    while !b.all("#next-page").await.is_empty() {
        b.click("#next-page").await;
        visited.extend(b.attrs("#deliveries a.delivery", "href").await);
        assert!(visited.len() <= 4, "{visited:?}");
    }
    let distinct: std::collections::BTreeSet<_> = visited.iter().collect();
    assert_eq!((visited.len(), distinct.len()), (4, 4));

    // AND a payment's timeline is in order, and links to its account
    b.goto(&url("/payments/generic/pay_console_1")).await;
    assert_eq!(b.text("#status").await, "PAID");
    let times = b.texts("#timeline li time").await;
    assert!(!times.is_empty());
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    b.screenshot(&shots().join("payment.png")).await;

    // AND the account's balance is the one `payhook balance` prints
    b.goto(&url(&format!("/accounts/{ACCOUNT}"))).await;
    let shown: i64 = b
        .attr(r#"td.balance[data-currency="NGN"]"#, "data-minor")
        .await
        .parse()
        .unwrap();
    assert_eq!(shown, cli_balance(&store));
    assert_eq!(shown, 17_000);
    b.screenshot(&shots().join("account.png")).await;

    // AND the traffic chart is drawn: bars with height
    b.goto(&url("/traffic?window=hour")).await;
    let heights = b.attrs("#traffic-chart rect.bar", "height").await;
    assert!(!heights.is_empty() && heights.iter().all(|h| h.parse::<u32>().unwrap() > 0));
    b.screenshot(&shots().join("traffic.png")).await;
    b.goto(&url("/attention")).await;
    assert_eq!(b.text(r#"h2 span.count[data-outcome="parked"]"#).await, "1");
    b.screenshot(&shots().join("attention.png")).await;
    // AND no page is wider than the window, at 1280 px or on a 375 px phone
    for width in [1280, 375] {
        b.resize(width, 900).await;
        for path in [
            "/attention",
            "/deliveries?since=1h",
            "/traffic?window=day",
            &format!("/accounts/{ACCOUNT}"),
        ] {
            b.goto(&url(path)).await;
            assert!(
                b.overflow_px().await <= 0,
                "{path} at {width} px: {} px too wide",
                b.overflow_px().await
            );
        }
    }
    b.resize(1280, 1000).await;

    // WHEN "my customer paid for order ord_7731 and wallet_7 shows nothing": the order id is
    // typed into the search box every page carries
    let order = common::event_body(
        "evt_browser_order",
        "payment.succeeded",
        serde_json::json!({"reference": "pay_browser_order", "account": "wallet_7",
            "amount": 123_456, "currency": "NGN", "metadata": {"order_id": "ord_7731"}}),
    );
    let webhook = app(store.clone(), 30_000);
    assert_eq!(
        common::send(&webhook, common::signed(&order)).await.status,
        200
    );
    b.goto(&url("/deliveries")).await;
    b.type_and_submit(r#"header input[name="q"]"#, "ord_7731")
        .await;
    // THEN its delivery is found with its amount and account
    let found = b.texts("#found-by-order tbody td").await;
    assert!(found.iter().any(|t| t == "1234.56 NGN"), "{found:?}");
    assert!(found.iter().any(|t| t == "wallet_7"), "{found:?}");
    b.screenshot(&shots().join("order-search.png")).await;
    // AND the delivery shows what was answered and which signature headers were checked
    b.click("#found-by-order a.delivery").await;
    assert!(b.text("#answer-body").await.contains("applied"));
    let headers = b.text("#verified-headers").await;
    assert!(
        headers.contains("webhook-signature: v1,\u{2022}"),
        "{headers}"
    );
    // AND its payment is PAID into wallet_7, whose balance, one click on, holds the money
    b.click(r#"a[href="/payments/generic/pay_browser_order"]"#)
        .await;
    assert_eq!(b.text("#status").await, "PAID");
    b.click(r#"a[href="/accounts/wallet_7"]"#).await;
    let shown: i64 = b
        .attr(r#"td.balance[data-currency="NGN"]"#, "data-minor")
        .await
        .parse()
        .unwrap();
    assert_eq!(shown, 123_456);

    // WHEN the parked refund is replayed: dry run, then confirm
    b.goto(&parked_href).await;
    b.screenshot(&shots().join("delivery.png")).await;
    let token = b.attr(r#"input[name="csrf"]"#, "value").await;
    let delivery = b.attr(r#"input[name="delivery"]"#, "value").await;
    b.click("#replay-one").await;
    let prediction = b.text("#prediction").await;
    assert!(
        prediction.contains(&format!("applied generic:refund:{}", seeded.refund)),
        "{prediction}"
    );
    assert_eq!(cli_balance(&store), 17_000, "the dry run moved nothing");
    b.screenshot(&shots().join("replay-dry-run.png")).await;
    b.click("#confirm").await;
    // THEN it applied once
    assert!(b.text("#result").await.contains(r#""outcome": "applied""#));
    assert_eq!(cli_balance(&store), 12_000);
    // AND a second confirm changes nothing
    b.goto(&parked_href).await;
    b.click("#replay-one").await;
    b.click("#confirm").await;
    assert!(b.text("#result").await.contains(r#""outcome": "replayed""#));
    assert_eq!(cli_balance(&store), 12_000);
    // AND needs attention no longer lists it: its key is finished
    b.goto(&url("/attention")).await;
    assert_eq!(b.text(r#"h2 span.count[data-outcome="parked"]"#).await, "0");
    assert!(
        b.text(r#"p.settled[data-outcome="parked"]"#)
            .await
            .starts_with("1 finished"),
        "{}",
        b.source().await
    );

    // AND a form on another origin, even holding the real token, is refused
    let evil = cross_site_page(&console.url, &token, &delivery).await;
    b.goto(&evil).await;
    b.click("#evil").await;
    // The click returns before the refusal page has loaded: wait for it (at most 10 s).
    let mut refused = false;
    for _ in 0..100 {
        if b.source().await.contains("cross-site request refused") {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refused, "{}", b.source().await);
    assert_eq!(cli_balance(&store), 12_000);

    // WHEN a payout is open, the payouts page links to its own page
    let payout = common::console_seed::open_payout(&store, "browser-1").await;
    b.goto(&url("/payouts")).await;
    b.click(&format!(r#"a.payout[href="/payouts/{payout}"]"#))
        .await;
    // THEN it says what it waits for, and its timeline starts with its opening
    assert!(!b.text("#payout-next").await.is_empty());
    let steps = b.texts("#payout-timeline tbody tr td:nth-child(2)").await;
    assert_eq!(
        steps.first().map(String::as_str),
        Some("opened"),
        "{steps:?}"
    );
    b.screenshot(&shots().join("payout.png")).await;
}

/// The console as another Unix user on the same host would try it: `nobody`, with no AWS
/// credentials, who can reach the loopback port and list processes.
#[tokio::test]
async fn another_local_user_can_neither_find_the_token_nor_use_the_console() {
    let runuser = std::path::Path::new("/usr/sbin/runuser");
    let curl = std::path::Path::new("/usr/bin/curl");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !(runuser.exists() && curl.exists() && root) {
        eprintln!("SKIPPED: needs root, runuser and curl to act as another user");
        return;
    }
    // GIVEN the console binary over seeded tables, run by the operator
    let store = store("console_other_user").await;
    seed(&app(store.clone(), 30_000)).await;
    let console = ConsoleProcess::start(&store);
    let token = console.entry.rsplit("token=").next().unwrap().to_owned();
    let pid = console.child.id();
    let as_nobody = |args: &[&str]| {
        let out = std::process::Command::new(runuser)
            .args(["-u", "nobody", "--"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };

    // WHEN `nobody` looks for the token where processes show themselves
    let (_, cmdline) = as_nobody(&["cat", &format!("/proc/{pid}/cmdline")]);
    let (environ_read, environ) = as_nobody(&["cat", &format!("/proc/{pid}/environ")]);

    // THEN it is in neither (the environment is not even readable)
    assert!(!cmdline.contains(&token), "argv holds the token");
    assert!(
        !environ_read && !environ.contains(&token),
        "the environment holds the token"
    );

    // WHEN it asks the console for pages and a raw body, and posts a replay
    let deliveries = format!("{}/deliveries", console.url);
    let replay = format!("{}/replay", console.url);
    let (_, page) = as_nobody(&["curl", "-s", "-w", "%{http_code}", &deliveries]);
    let (_, guessed) = as_nobody(&[
        "curl",
        "-s",
        "-w",
        "%{http_code}",
        "--cookie",
        "payhook_console_1=guess",
        &deliveries,
    ]);
    let (_, posted) = as_nobody(&[
        "curl",
        "-s",
        "-w",
        "%{http_code}",
        "-H",
        &format!("Origin: {}", console.url),
        "--data",
        "csrf=x&step=confirm&outcome=parked",
        &replay,
    ]);

    // THEN every answer is 401, with nothing of the log in it
    for answer in [&page, &guessed, &posted] {
        assert!(answer.ends_with("401"), "{answer}");
        assert!(!answer.contains("pay_console"), "{answer}");
    }
    // AND the operator, with the printed address, gets in
    let (ok, mine) = {
        let out = std::process::Command::new(curl)
            .args(["-s", "-L", "-b", "", "-w", "%{http_code}", &console.entry])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    assert!(
        ok && mine.ends_with("200") && mine.contains("pay_console"),
        "{mine}"
    );
}
